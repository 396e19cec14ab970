"""The whole synthetic corpus: plan it from the config, render it in parallel, write the tree.

Planning (conversation names, discs, speakers, topics, per-conversation seeds) happens up
front in one process, so the result does not depend on how conversations are spread over
worker processes. eSpeak NG keeps state between utterances that is not reset by
re-initialising it, so each conversation is rendered in a fresh worker process
(maxtasksperchild=1): that makes every file a function of the config alone, byte for byte.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from asr.data.synth import grammar as gr
from asr.data.synth import layouts
from asr.data.synth.dictionary import (
    merged_lines,
    training_transcripts,
    transcript_pronunciations,
    word_pronunciations,
    write_dictionary_lines,
)
from asr.data.synth.quirks import QUIRK_CONVERSATIONS, QUIRKS, apply_quirks
from asr.data.synth.channel import RATE
from asr.data.synth.conversation import Conversation, ConversationSpec, render_conversation
from asr.data.synth.speakers import Speaker, SpeakerSets, make_speakers
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError
from asr.utils.record import outputs_of, why_rerun, write_record

log = logging.getLogger("asr.synth")

SUBSETS = ("train", "eval_swb", "eval_callhome")
FISHER = "fisher"  # a subset only when synth.fisher_conversations > 0
FIRST_SWB_NUMBER = 2001  # Switchboard-1 conversations are sw02001 .. sw04940
EVAL_NUMBERS = (4000, 5000)  # Hub5-2000 names are sw_4NNN and en_4NNN
DISCS = 4
SPEAKERS_FILE = "synth_speakers.tsv"
SUMMARY_FILE = "synth_summary.json"


@dataclass(frozen=True)
class CorpusPlan:
    conversations: list[ConversationSpec]
    speakers: SpeakerSets
    train_numbers: dict[str, tuple[int, int]]  # sw0NNNN -> (NNNN, disc)
    fisher_numbers: dict[str, tuple[int, int]] = field(default_factory=dict)  # fe_03_NNNNN -> (NNNNN, disc)


def _validate(cfg: DictConfig) -> None:
    counts = {
        k: int(cfg[k])
        for k in (
            "train_conversations",
            "eval_swb_conversations",
            "eval_callhome_conversations",
            "fisher_conversations",
            "jobs",
        )
    }
    if any(v < 0 for v in counts.values()) or counts["jobs"] < 1:
        raise InputError(f"synth config: counts must be >= 0 and jobs >= 1, got {counts}")
    if cfg.train_speakers < 2:
        raise InputError(f"synth.train_speakers={cfg.train_speakers}: a conversation needs two speakers")
    if cfg.conversation_minutes <= 0 or cfg.eval_conversation_minutes <= 0:
        raise InputError("synth.conversation_minutes and synth.eval_conversation_minutes must be > 0")
    if cfg.eval_swb_conversations + cfg.eval_callhome_conversations > 0 and cfg.train_conversations == 0:
        raise InputError(
            "synth: evaluation speakers are defined relative to training ones; set train_conversations > 0"
        )
    unknown = [q for q in cfg.quirks if q not in QUIRKS]
    if unknown:
        raise InputError(f"synth.quirks: unknown {unknown}; choose among {list(QUIRKS)}")


def _seed(seed: int, subset: int, index: int) -> int:
    return int(np.random.SeedSequence([seed, subset, index]).generate_state(1)[0])


def _swb_numbers(rng: np.random.Generator, count: int) -> list[int]:
    """Increasing conversation numbers with the small gaps the real release has."""
    steps = rng.choice([1, 2, 3], size=count, p=[0.8, 0.15, 0.05])
    numbers = FIRST_SWB_NUMBER + np.cumsum(steps) - steps[0]
    if count and numbers[-1] > 9999:
        raise InputError(f"synth.train_conversations={count} is more than sw0NNNN names can hold")
    return [int(n) for n in numbers]


def _train_pairs(rng: np.random.Generator, pool: list[Speaker], count: int) -> list[tuple[Speaker, Speaker]]:
    """Two different speakers per conversation, using the pool evenly."""
    queue: list[int] = []
    pairs = []
    for _ in range(count):
        if len(queue) < 2:
            queue += [int(i) for i in rng.permutation(len(pool)) if int(i) not in queue]
        a = queue.pop(0)
        b = queue.pop(next(j for j, i in enumerate(queue) if i != a))
        pairs.append((pool[a], pool[b]))
    return pairs


def _train_specs(
    cfg: DictConfig, rng: np.random.Generator, pool: list[Speaker]
) -> dict[str, tuple[ConversationSpec, int, int]]:
    """Switchboard-1 style conversations by name: (spec, number, disc), spread over 4 discs."""
    count = int(cfg.train_conversations)
    topics = sorted(gr.TOPICS)
    out = {}
    for i, (number, pair) in enumerate(zip(_swb_numbers(rng, count), _train_pairs(rng, pool, count))):
        name = f"sw0{number}"
        spec = ConversationSpec(
            name,
            "train",
            pair,
            topics[int(rng.integers(len(topics)))],
            60.0 * float(cfg.conversation_minutes),
            _seed(cfg.seed, 0, i),
            "swb",
            held_out=False,
        )
        out[name] = (spec, number, 1 + i * DISCS // count)
    return out


def _eval_specs(
    cfg: DictConfig, rng: np.random.Generator, code: int, prefix: str, pool: list[Speaker], style: str
) -> list[ConversationSpec]:
    """Hub5-2000 style conversations (sw_4NNN or en_4NNN), a new pair of speakers for each."""
    subset = "eval_swb" if prefix == "sw" else "eval_callhome"
    topics = sorted(gr.TOPICS)
    numbers = sorted(int(n) for n in rng.choice(np.arange(*EVAL_NUMBERS), size=len(pool) // 2, replace=False))
    return [
        ConversationSpec(
            f"{prefix}_{number}",
            subset,
            (pool[2 * i], pool[2 * i + 1]),
            topics[int(rng.integers(len(topics)))],
            60.0 * float(cfg.eval_conversation_minutes),
            _seed(cfg.seed, code, i),
            style,
            held_out=True,
        )
        for i, number in enumerate(numbers)
    ]


def _fisher_specs(
    cfg: DictConfig, rng: np.random.Generator, pool: list[Speaker]
) -> dict[str, tuple[ConversationSpec, int, int]]:
    """Fisher style calls by name: (spec, number, disc); the first half in part 1, the rest in part 2."""
    count = int(cfg.fisher_conversations)
    topics = sorted(gr.TOPICS)
    in_part1 = (count + 1) // 2
    out = {}
    for i, pair in enumerate(_train_pairs(rng, pool, count)):
        number = 1 + i if i < in_part1 else layouts.FISHER_PART2_FIRST + i - in_part1
        name = layouts.fisher_name(number)
        spec = ConversationSpec(
            name,
            FISHER,
            pair,
            topics[int(rng.integers(len(topics)))],
            60.0 * float(cfg.conversation_minutes),
            _seed(cfg.seed, 3, i),
            "swb",
            held_out=False,
        )
        out[name] = (spec, number, 1 + i % layouts.FISHER_DISCS)
    return out


def plan_corpus(cfg: DictConfig) -> CorpusPlan:
    _validate(cfg)
    rng = np.random.default_rng(np.random.SeedSequence([int(cfg.seed), 99]))
    speakers = make_speakers(
        rng, int(cfg.train_speakers), 2 * int(cfg.eval_swb_conversations), 2 * int(cfg.eval_callhome_conversations)
    )
    train = _train_specs(cfg, rng, speakers.train)
    conversations = [spec for spec, _, _ in train.values()]
    # The test set's own stream: the same evaluation conversations whatever the training size,
    # so that WERs of differently sized training sets compare on one test set.
    eval_rng = np.random.default_rng(np.random.SeedSequence([int(cfg.seed), 98]))
    conversations += _eval_specs(cfg, eval_rng, 1, "sw", speakers.eval_swb, "swb")
    conversations += _eval_specs(cfg, eval_rng, 2, "en", speakers.eval_callhome, "callhome")
    numbers = {name: (number, disc) for name, (_, number, disc) in train.items()}
    fisher = _fisher_specs(cfg, rng, speakers.train) if cfg.fisher_conversations else {}
    conversations += [spec for spec, _, _ in fisher.values()]
    fisher_numbers = {name: (number, disc) for name, (_, number, disc) in fisher.items()}
    return CorpusPlan(
        conversations=conversations, speakers=speakers, train_numbers=numbers, fisher_numbers=fisher_numbers
    )


def _audio_path(root: Path, plan: CorpusPlan, spec: ConversationSpec) -> Path:
    if spec.subset == "train":
        number, disc = plan.train_numbers[spec.name]
        return layouts.swb_audio_path(root, number, disc)
    if spec.subset == FISHER:
        return layouts.fisher_audio_path(root, *plan.fisher_numbers[spec.name])
    return layouts.hub5_audio_path(root, spec.name)


def _render_job(job: tuple[ConversationSpec, str]) -> Conversation:
    """Runs in a fresh worker process: render one conversation and write its SPHERE file."""
    spec, path = job
    conversation, audio = render_conversation(spec)
    layouts.write_sphere(Path(path), audio)
    return conversation


def render_all(jobs: list[tuple[ConversationSpec, str]], processes: int) -> Iterator[Conversation]:
    """The conversations as their workers finish them (in no fixed order)."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with context.Pool(processes=processes, maxtasksperchild=1) as pool:
        yield from tqdm(pool.imap_unordered(_render_job, jobs), total=len(jobs), desc="synth", unit="conv")


def plan_accents(plan: CorpusPlan) -> list[str]:
    """Every accent a speaker of the corpus has (training and evaluation)."""
    speakers = plan.speakers.train + plan.speakers.eval_swb + plan.speakers.eval_callhome
    return sorted({speaker.accent for speaker in speakers})


def side_accents(plan: CorpusPlan) -> dict[str, str]:
    """swNNNN{A,B} (a training side's transcript prefix) -> its speaker's accent."""
    out = {}
    for spec in plan.conversations:
        if spec.subset == "train":
            for side, speaker in zip("AB", spec.speakers):
                out[f"sw{plan.train_numbers[spec.name][0]}{side}"] = speaker.accent
    return out


def add_dictionary(root: Path, plan: CorpusPlan, processes: int) -> Path:
    """Write the corpus' pronunciation dictionary, phonemised in fresh processes: eSpeak's state
    carries from call to call, and the caller's own engine (a test rendering in-process) must
    not see these calls. The training transcripts are split into one contiguous part per
    process and merged in order, so the file is the one a single process writes."""
    transcripts = list(training_transcripts(root, side_accents(plan)))
    size = max(1, -(-len(transcripts) // max(processes, 1)))
    parts = [transcripts[i : i + size] for i in range(0, len(transcripts), size)]
    context = mp.get_context("forkserver")
    with context.Pool(processes=max(processes, 1), maxtasksperchild=1) as pool:
        words = pool.apply_async(word_pronunciations, (plan_accents(plan),))
        in_context = pool.map(transcript_pronunciations, parts, chunksize=1)
        return write_dictionary_lines(root, merged_lines(words.get(), in_context))


# ---- summary ------------------------------------------------------------------------


@dataclass
class SubsetTally:
    """What a subset holds, counted one conversation at a time."""

    conversations: int = 0
    speakers: set[str] = field(default_factory=set)
    audio_samples: int = 0
    speech_samples: int = 0
    utterances: int = 0
    words: int = 0
    vocabulary: set[str] = field(default_factory=set)

    def add(self, conversation: Conversation) -> None:
        self.conversations += 1
        self.speakers.update(s.id for s in conversation.spec.speakers)
        self.audio_samples += 2 * conversation.num_samples
        for segments in conversation.segments.values():
            for segment in segments:
                lexical = [t.token.word for t in segment.tokens if t.token.is_lexical]
                if lexical:
                    self.utterances += 1
                    self.speech_samples += segment.end - segment.start
                    self.words += len(lexical)
                    self.vocabulary.update(lexical)

    def summary(self) -> dict:
        return {
            "conversations": self.conversations,
            "speakers": len(self.speakers),
            "audio_hours": round(self.audio_samples / RATE / 3600, 4),
            "speech_hours": round(self.speech_samples / RATE / 3600, 4),
            "utterances": self.utterances,
            "words": self.words,
            "vocabulary": len(self.vocabulary),
        }


def subsets_of(specs: list[ConversationSpec]) -> tuple[str, ...]:
    return SUBSETS + ((FISHER,) if any(spec.subset == FISHER for spec in specs) else ())


def corpus_summary(tallies: dict[str, SubsetTally]) -> dict:
    summary = {subset: tally.summary() for subset, tally in tallies.items()}
    summary["total_vocabulary"] = len(set().union(*(tally.vocabulary for tally in tallies.values())))
    return summary


def format_summary(summary: dict) -> str:
    columns = ("conversations", "speakers", "audio_hours", "speech_hours", "utterances", "words", "vocabulary")
    lines = [f"{'subset':<14}" + "".join(f"{c:>14}" for c in columns)]
    for subset in SUBSETS + (FISHER,):
        if subset in summary:
            lines.append(f"{subset:<14}" + "".join(f"{summary[subset][c]:>14}" for c in columns))
    lines.append(f"vocabulary over all subsets: {summary['total_vocabulary']} words")
    return "\n".join(lines)


def _speaker_rows(plan: CorpusPlan) -> str:
    sides: dict[str, list[str]] = {}
    for spec in plan.conversations:
        for side, speaker in zip("AB", spec.speakers):
            sides.setdefault(speaker.id, []).append(f"{spec.name}-{side}")
    header = "subset\tid\taccent\tvariant\tgender\trate\tpitch\tintonation\tgain_db\tsides"
    rows = [header]
    for subset, pool in (
        ("train", plan.speakers.train),
        ("eval_swb", plan.speakers.eval_swb),
        ("eval_callhome", plan.speakers.eval_callhome),
    ):
        for s in pool:
            rows.append(
                f"{subset}\t{s.id}\t{s.accent}\t{s.variant}\t{s.gender}\t{s.rate}\t{s.pitch}\t"
                f"{s.intonation}\t{s.gain_db}\t{' '.join(sides.get(s.id, []))}"
            )
    return "\n".join(rows) + "\n"


def write_transcript(root: Path, plan: CorpusPlan, conversation: Conversation) -> None:
    """A training or Fisher conversation's transcript files (evaluation ones are written together)."""
    if conversation.spec.subset == "train":
        layouts.write_ms98(root, plan.train_numbers[conversation.spec.name][0], conversation)
    elif conversation.spec.subset == FISHER:
        layouts.write_fisher_transcript(root, plan.fisher_numbers[conversation.spec.name][0], conversation)


def write_records(root: Path, plan: CorpusPlan, evaluation: list[Conversation], summary: dict) -> None:
    """The evaluation references and the generator's own records (audio is written by workers)."""
    if evaluation:
        layouts.write_hub5_text(root, evaluation)
    (root / SPEAKERS_FILE).write_text(_speaker_rows(plan), encoding="ascii")
    (root / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="ascii")


STAGE, RERUN = "synth", "python -m asr.data.synth synth.force=true"
AUDIO = (".sph",)  # recorded by size: a sha1 of every recording at each check would cost minutes


def corpus_options(cfg: DictConfig) -> dict:
    """What the corpus is made from (not where or how fast), as its stage record's options."""
    settings = OmegaConf.to_container(cfg, resolve=True)
    for key in ("out_dir", "jobs", "force"):
        settings.pop(key, None)
    return settings


def why_synthesize(cfg: DictConfig) -> str | None:
    """None when cfg.out_dir holds a complete corpus made from this config (its stage record
    `synth.record.json`, asr/utils/record.py); else why it must be made."""
    return why_rerun(cfg.out_dir, STAGE, corpus_options(cfg), [])


def render_and_write(
    root: Path, plan: CorpusPlan, jobs: list[tuple[ConversationSpec, str]], processes: int, keep_train: int
) -> tuple[list[Conversation], dict]:
    """Render every conversation, writing each one's transcript as it comes, so that only the
    evaluation conversations (a fixed few) and the first `keep_train` training ones by name (for
    the quirks) stay in memory; returns those and the corpus summary."""
    tallies = {subset: SubsetTally() for subset in subsets_of(plan.conversations)}
    first_train = set(sorted(spec.name for spec in plan.conversations if spec.subset == "train")[:keep_train])
    kept: dict[str, Conversation] = {}
    for conversation in render_all(jobs, processes):
        tallies[conversation.spec.subset].add(conversation)
        write_transcript(root, plan, conversation)
        if conversation.spec.subset.startswith("eval") or conversation.spec.name in first_train:
            kept[conversation.spec.name] = conversation
    in_plan_order = [kept[spec.name] for spec in plan.conversations if spec.name in kept]
    summary = corpus_summary(tallies)
    write_records(root, plan, [c for c in in_plan_order if c.spec.subset.startswith("eval")], summary)
    return in_plan_order, summary


def synthesize_corpus(cfg: DictConfig) -> dict:
    """Build the corpus under a temporary name and move it to cfg.out_dir when complete."""
    plan = plan_corpus(cfg)
    out_dir = Path(cfg.out_dir)
    log.info("synthesising %d conversations into %s with %d processes", len(plan.conversations), out_dir, cfg.jobs)
    started = time.perf_counter()
    with atomic_dir(out_dir) as tmp:
        tmp.chmod(0o755)  # mkdtemp makes it private; a corpus is for every user to read
        jobs = [(spec, str(_audio_path(tmp, plan, spec))) for spec in plan.conversations]
        kept, summary = render_and_write(tmp, plan, jobs, int(cfg.jobs), QUIRK_CONVERSATIONS if cfg.quirks else 0)
        if cfg.quirks:
            summary["quirks"] = apply_quirks(tmp, list(cfg.quirks), kept, plan.train_numbers)
            (tmp / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="ascii")
        add_dictionary(tmp, plan, int(cfg.jobs))
        write_record(tmp, STAGE, RERUN, corpus_options(cfg), [], outputs_of(tmp, sizes_only=AUDIO))
    elapsed = time.perf_counter() - started
    audio_hours = sum(summary[s]["audio_hours"] for s in subsets_of(plan.conversations))
    log.info("corpus summary:\n%s", format_summary(summary))
    log.info(
        "synthesised %.3f h of audio (2 channels) in %.1f s: %.1f s per hour of audio with %d processes",
        audio_hours,
        elapsed,
        elapsed / max(audio_hours, 1e-9),
        cfg.jobs,
    )
    return {**summary, "seconds": elapsed}
