"""Kaldi alignments and transition models in every supported form, read as ali-to-pdf would."""

import gzip

import kaldiio
import numpy as np
import pytest
from tests.fixtures.hybrid_corpus import (
    HMM_PDF_OF_TID,
    binary_ali_archive,
    binary_transition_model,
    hmm_system,
    random_alignment,
    text_ali_archive,
    text_transition_model,
    write_ali_gz,
)

from asr.kaldi.alignments import AlignmentArchives, parse_int_vector_archive, read_int_vectors, read_pdf_map
from asr.utils.errors import InputError

# A chain-style topology (one emitting state whose self-loop has its own pdf class) next to
# an HMM whose forward transition is listed before its self-loop: transition ids follow the
# order of the transitions in the topology, and only a transition back to its own state is a
# self-loop.
CHAIN_ENTRIES = [
    ([1], [(0, 1, [(0, 0.5), (1, 0.5)]), (-1, -1, [])]),
    ([2], [(0, 2, [(1, 0.4), (0, 0.6)]), (1, 1, [(1, 0.5), (2, 0.5)]), (-1, -1, [])]),
]
CHAIN_TUPLES = [(1, 0, 0, 4), (1, 0, 2, 5), (2, 0, 1, 6), (2, 1, 3, 3)]
# tstate 1 (1,0,0,4): tid 1 self-loop -> 4, tid 2 forward -> 0
# tstate 2 (1,0,2,5): tid 3 self-loop -> 5, tid 4 forward -> 2
# tstate 3 (2,0,1,6): tid 5 forward (to state 1) -> 1, tid 6 self-loop -> 6
# tstate 4 (2,1,3,3): tid 7 self-loop -> 3, tid 8 forward -> 3
CHAIN_PDF_OF_TID = [-1, 4, 0, 5, 2, 1, 6, 3, 3]
GMM_TRAILER = "<DIMENSION> 8 <NUMPDFS> 10 <DiagGMM> <GCONSTS> [ -11.2 ] </DiagGMM> \n"


@pytest.mark.parametrize("form", ["text", "text_with_gmms", "binary"])
def test_hmm_transition_model_maps_transition_ids_like_ali_to_pdf(tmp_path, form):
    entries, tuples = hmm_system()
    path = tmp_path / "final.mdl"
    if form == "binary":
        path.write_bytes(binary_transition_model(entries, tuples))
    else:
        path.write_text(text_transition_model(entries, tuples, GMM_TRAILER if form == "text_with_gmms" else ""))
    model = read_pdf_map(path)
    assert model.pdf_of.tolist() == HMM_PDF_OF_TID
    assert model.num_pdfs == 10 and model.num_transition_ids == 24
    assert model.to_pdfs(np.array([1, 2, 19, 22, 24]), "x").tolist() == [0, 0, 6, 9, 8]


@pytest.mark.parametrize("binary", [False, True])
def test_chain_style_tuples_map_self_loops_to_their_own_pdf(tmp_path, binary):
    path = tmp_path / "final.mdl"
    if binary:
        path.write_bytes(binary_transition_model(CHAIN_ENTRIES, CHAIN_TUPLES))
    else:
        path.write_text(text_transition_model(CHAIN_ENTRIES, CHAIN_TUPLES))
    content = path.read_bytes()
    assert b"<Tuples> " in content and (b"<ForwardPdfClass> 0 <SelfLoopPdfClass> 2" in content) != binary
    model = read_pdf_map(path)
    assert model.pdf_of.tolist() == CHAIN_PDF_OF_TID and model.num_pdfs == 7


def test_two_column_table_is_a_mapping_too(tmp_path):
    path = tmp_path / "tid2pdf.txt"
    path.write_text("# transition-id pdf-id\n1 0\n2 0\n3 1\n\n4 2\n")
    model = read_pdf_map(path)
    assert model.pdf_of.tolist() == [-1, 0, 0, 1, 2] and model.num_pdfs == 3
    path.write_text("1 0\n2 zero\n")
    with pytest.raises(InputError, match=r"tid2pdf.txt:2: expected `transition-id pdf-id`"):
        read_pdf_map(path)


def test_truncated_or_foreign_models_are_reported(tmp_path):
    entries, tuples = hmm_system()
    path = tmp_path / "final.mdl"
    path.write_bytes(binary_transition_model(entries, tuples)[:120])
    with pytest.raises(InputError, match="ends inside the transition model"):
        read_pdf_map(path)
    path.write_bytes(b"\0B<Nnet> <NumComponents> ")
    with pytest.raises(InputError, match="expected <TransitionModel>, got '<Nnet>'"):
        read_pdf_map(path)


def alignments(seed: int, count: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"utt{i:02d}": random_alignment(rng)[0] for i in range(count)}


def test_binary_text_gzipped_and_scp_archives_read_alike(tmp_path):
    expected = alignments(1)
    (tmp_path / "a.ark").write_bytes(binary_ali_archive(expected))
    (tmp_path / "a.txt").write_bytes(text_ali_archive(expected))
    write_ali_gz(tmp_path / "b.gz", expected, binary=True)
    write_ali_gz(tmp_path / "t.gz", expected, binary=False)
    with kaldiio.WriteHelper(f"ark,scp:{tmp_path / 's.ark'},{tmp_path / 's.scp'}") as writer:
        for utt in sorted(expected):
            writer(utt, expected[utt])
    for name in ["a.ark", "a.txt", "b.gz", "t.gz", "s.scp"]:
        got = dict(read_int_vectors(tmp_path / name))
        assert list(got) == sorted(expected), name
        for utt in expected:
            assert got[utt].dtype == np.int32 and np.array_equal(got[utt], expected[utt]), (name, utt)
    # The numpy decoder of binary vectors agrees with kaldiio's element-by-element reader.
    reference = dict(kaldiio.load_ark(str(tmp_path / "a.ark")))
    mine = dict(parse_int_vector_archive((tmp_path / "a.ark").read_bytes(), "a.ark"))
    assert all(np.array_equal(mine[u], reference[u]) for u in reference)


def test_kaldi_alignment_dir_maps_through_its_final_mdl(tmp_path):
    entries, tuples = hmm_system()
    ali_dir = tmp_path / "tri4_ali"
    first, second = alignments(2, 3), {f"x{k}": v for k, v in alignments(3, 2).items()}
    write_ali_gz(ali_dir / "ali.1.gz", first)
    write_ali_gz(ali_dir / "ali.10.gz", second, binary=False)
    write_ali_gz(ali_dir / "ali.2.gz", {})
    (ali_dir / "final.mdl").write_bytes(binary_transition_model(entries, tuples))
    archives = AlignmentArchives(str(ali_dir))
    assert [f.name for f in archives.files] == ["ali.1.gz", "ali.2.gz", "ali.10.gz"]
    keep = {"utt00", "utt02", "xutt01"}
    got = dict(archives.read(keep))
    assert set(got) == keep
    table = np.array(HMM_PDF_OF_TID)
    assert np.array_equal(got["utt02"], table[first["utt02"]]) and np.array_equal(
        got["xutt01"], table[second["xutt01"]]
    )
    assert "transition ids -> pdfs by" in archives.description


def test_pdf_archives_are_used_as_they_are(tmp_path):
    pdfs = {u: np.array(HMM_PDF_OF_TID)[v].astype(np.int32) for u, v in alignments(4).items()}
    write_ali_gz(tmp_path / "pdf.1.gz", dict(list(pdfs.items())[:2]))
    write_ali_gz(tmp_path / "pdf.2.gz", dict(list(pdfs.items())[2:]))
    archives = AlignmentArchives(str(tmp_path / "pdf.*.gz"))
    assert archives.mapping is None
    got = dict(archives.read(set(pdfs)))
    assert all(np.array_equal(got[u], pdfs[u]) for u in pdfs)


def test_alignment_errors_name_the_file_and_the_fix(tmp_path):
    write_ali_gz(tmp_path / "ali.1.gz", alignments(5))
    with pytest.raises(InputError, match="hold transition ids, but there is no .*final.mdl.*train.transition_model"):
        AlignmentArchives(str(tmp_path))
    (tmp_path / "table").write_text("1 0\n2 1\n")
    archives = AlignmentArchives(str(tmp_path), transition_model=str(tmp_path / "table"))
    with pytest.raises(InputError, match=r"ali.1.gz: 'utt00': transition id \d+ outside 1..2 .*pdf ids already"):
        list(archives.read({"utt00"}))
    (tmp_path / "broken.gz").write_bytes(gzip.compress(binary_ali_archive(alignments(6)))[:-30])
    with pytest.raises(InputError, match="broken.gz: cannot decompress"):
        list(read_int_vectors(tmp_path / "broken.gz"))
    kaldiio.save_ark(str(tmp_path / "feats.ark"), {"u": np.zeros((3, 2), dtype=np.float32)})
    with pytest.raises(InputError, match="feats.ark: 'u': not an int32 vector"):
        list(read_int_vectors(tmp_path / "feats.ark"))
    with pytest.raises(InputError, match="no file matches"):
        AlignmentArchives(str(tmp_path / "nothing.*.gz"))
