"""Word error rate as the demo-whisper recipe counts it (tools/train_demo_whisper.py and
tools/eval_demo_whisper.py): lower-case, everything but letters, digits and apostrophes becomes a
space, then a word-level Levenshtein distance. Standard library only."""
import re


def normalise(text):
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


def word_errors(ref, hyp):
    """(edits, reference words) between two texts after normalise()."""
    r, h = normalise(ref), normalise(hyp)
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(h)], len(r)
