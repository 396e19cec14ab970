"""Crafted Hub5 scoring cases: a small GLM and (reference | hypothesis) pairs, each scored as
one stm segment, with the counts NIST SCTK 2.4.10 (hubscr.pl -V -l english -h hub5) gives.

The expected counts were recorded by running SCTK on exactly these files; the tests compare
the native scorer with them, and with a live SCTK run where SCTK is installed.
"""

GLM = """;; test GLM (NIST1)
* name "test.glm"
* format = 'NIST1'
* max_nrules = '100'
* copy_no_hit = 'T'
* case_sensitive = 'F'
;; Hesitations
UH => %HESITATION / [ ] __ [ ] ;; hesitation
UM => %HESITATION / [ ] __ [ ]
MMM => %HESITATION / [ ] __ [ ]
;; Spellings
OK => OKAY / [ ] __ [ ]
MM-HMM => UM-HUM / [ ] __ [ ]
ALRIGHT => {ALL RIGHT / ALRIGHT} / [ ] __ [ ]
GONNA => {GONNA / GOING TO} / [ ] __ [ ]
;; Contractions
[DON'T] => [{DON'T / DO NOT}] / [ ] __ [ ] ;; contraction
[THERE'S] => [{THERE'S / THERE IS / THERE HAS}] / [ ] __ [ ] ;; contraction
"""

STM_HEADER = """;; CATEGORY "0" "" ""
;; LABEL "O" "Overall" "All Segments in the test set"
;; CATEGORY "1" "Hub5 test set" ""
;; LABEL "en" "CALLHOME" "CALLHOME conversations"
;; LABEL "sw" "Switchboard" "Switchboard conversations"
;; CATEGORY "2" "Sex" ""
;; LABEL "F" "Female" "Female Talkers"
;; LABEL "M" "Male" "Male Talkers"
"""

# (reference text, hypothesis words, expected (#C, #S, #D, #I) from SCTK)
CASES = [
    ("A (UH) B", "a b", (3, 0, 0, 0)),  # a deleted optional word counts as correct
    ("A (UH) B", "a x y b", (2, 1, 0, 1)),  # next to an optional word: substitution + insertion
    ("A (UH) B", "a x b", (2, 1, 0, 0)),
    ("IN (%HESITATION) COLLEGE", "a college", (2, 1, 0, 0)),  # the optional word goes, not IN
    ("A B", "x", (0, 1, 1, 0)),
    ("A B", "b c", (1, 0, 1, 1)),
    ("A B C D E", "f a b c g", (3, 1, 1, 1)),
    ("(AB-) C", "about c", (2, 0, 0, 0)),  # fragment matches a word it begins
    ("(-SOLUTE) C", "absolute c", (1, 1, 0, 0)),  # only trailing-hyphen fragments do
    ("AB- C", "about c", (2, 0, 0, 0)),
    ("hello there", "HELLO There", (2, 0, 0, 0)),  # case never matters
    ("THERE'S", "there is", (2, 0, 0, 0)),  # contraction expanded in the reference
    ("THERE IS A WAY", "there's a way", (4, 0, 0, 0)),  # ... and in the hypothesis
    ("I DON'T KNOW", "i do know", (3, 0, 1, 0)),
    ("GONNA GO", "going to go", (3, 0, 0, 0)),
    ("OK (%HESITATION) YES", "okay mmm yes", (3, 0, 0, 0)),  # GLM hesitation in the hypothesis
    ("A", "%hesitation a", (1, 0, 0, 1)),  # an unmatched hesitation is an insertion
    # The GLM runs before hyphens are split: the reference keeps UH, the hypothesis' own UH
    # becomes %HESITATION.
    ("UH-HUH RIGHT", "uh huh right", (2, 1, 0, 0)),
    ("UH-HUH RIGHT", "uh-huh right", (3, 0, 0, 0)),  # hyphenated words split on both sides
    ("MM-HMM", "um-hum", (2, 0, 0, 0)),
    ("{A / B} C", "b c", (2, 0, 0, 0)),
    ("ALRIGHT THEN", "all right then", (3, 0, 0, 0)),
]

# Extra segments after the cases: an ignored region with a hypothesis word in it, and words
# between segments (they go to the next segment).
IGNORED = ("IGNORE_TIME_SEGMENT_IN_SCORING", "junk")
BETWEEN = ("GOOD BYE", "between good bye after", (2, 0, 0, 2))
