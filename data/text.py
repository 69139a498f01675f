"""A plain-text corpus as byte tokens: Tiny Shakespeare fetched once, or a learnable synthetic text.

Tokens are bytes shifted by one (``byte + 1``), so id 0 stays ``data.tokens.PAD``
and the vocabulary holds ``VOCAB_SIZE = 257`` ids: no tokenizer to download.
A corpus becomes samples of varying length, split at paragraph and line
boundaries and capped (``split_samples``); the last tenth is held out.
"""
import os

import numpy as np

from data.download import staged_download
from data.tokens import PAD

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
CORPUS_FILE = "input.txt"
# The size of Tiny Shakespeare's input.txt: a cut-short download is refused.
CORPUS_BYTES = 1_115_394
DEFAULT_TEXT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "TinyShakespeare")
VOCAB_SIZE = 257
# The samples held out for validation: the corpus's last tenth, as char-rnn and nanoGPT hold out.
VALIDATION_FRACTION = 0.1


class TextUnavailableError(RuntimeError):
    """The corpus is not on disk and could not be downloaded; the message says how to supply it."""


def _unavailable_message(url, data_dir, reason):
    return (f"Could not download Tiny Shakespeare from {url} ({reason}). Save that file by hand as "
            f"{os.path.join(data_dir, CORPUS_FILE)}, or use --synthetic.")


def corpus_problem(path, size=CORPUS_BYTES):
    """Why the file at ``path`` is not the corpus (a one-line reason), or None if it is.

    Example:
        >>> corpus_problem("missing.txt")
        'missing.txt does not exist'
        >>> _ = open("short.txt", "w").write("to be")
        >>> corpus_problem("short.txt")
        'short.txt holds 5 bytes, expected 1,115,394 (cut short?)'
    """
    if not os.path.isfile(path):
        return f"{path} does not exist"
    found = os.path.getsize(path)
    return None if found == size else f"{path} holds {found:,} bytes, expected {size:,} (cut short?)"


def ensure_corpus(data_dir=DEFAULT_TEXT_DIR, url=TINY_SHAKESPEARE_URL, size=CORPUS_BYTES):
    """The path of ``data_dir/input.txt`` once it holds the corpus, downloading it if needed.

    A valid file already there is used without touching the network.
    Otherwise ``url`` is fetched beside ``data_dir``, its size checked, and
    only then moved into place (``data.download.staged_download``): a
    failure leaves nothing behind. ``size`` is the corpus's size in bytes.

    Raises:
        TextUnavailableError: the download failed or brought a file of
            another size; the one-line message names the address and the file.

    Example:
        >>> os.makedirs("text")
        >>> _ = open("text/input.txt", "w").write("to be\\n")
        >>> ensure_corpus("text", size=6)  # the file is there: nothing to download
        'text/input.txt'
    """
    path = os.path.join(data_dir, CORPUS_FILE)
    if corpus_problem(path, size) is None:
        return path

    def unavailable(reason):
        return TextUnavailableError(_unavailable_message(url, data_dir, reason))

    with staged_download(url, data_dir, unavailable) as staging:
        fetched = os.path.join(staging, os.listdir(staging)[0])
        problem = corpus_problem(fetched, size)
        if problem:
            raise unavailable(f"{problem.replace(fetched, 'the file')}; nothing installed")
        os.makedirs(data_dir, exist_ok=True)
        os.replace(fetched, path)
    return path


def encode(text):
    """Byte tokens of ``text`` (str or bytes): each byte + 1, as an int32 array.

    Example:
        >>> encode("Hi\\n").tolist()
        [73, 106, 11]
    """
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.frombuffer(data, np.uint8).astype(np.int32) + 1


def decode(tokens):
    """The text of byte ``tokens``; PAD is dropped and bytes that are not UTF-8 show as U+FFFD.

    Example:
        >>> decode(encode("to be\\n") .tolist() + [0, 0])
        'to be\\n'
    """
    tokens = np.asarray(tokens, np.int64)
    return (tokens[tokens != PAD] - 1).astype(np.uint8).tobytes().decode("utf-8", errors="replace")


def split_samples(tokens, cap):
    """``tokens`` as samples of at most ``cap`` tokens, each ending at a paragraph or line end where it can.

    A paragraph (lines up to a blank line, which it keeps) is one sample if
    it fits; a longer one is filled line by line; a line longer than ``cap``
    is cut every ``cap`` tokens. Samples of one token (nothing to predict)
    are dropped. Returns a list of int32 arrays, in the corpus's order.

    Example:
        >>> [decode(s) for s in split_samples(encode("ab\\ncd\\n\\nefgh\\nij\\n"), cap=6)]
        ['ab\\ncd\\n', 'efgh\\n', 'ij\\n']
    """
    newline = encode("\n")[0]
    ends = np.flatnonzero(tokens == newline) + 1
    lines = np.split(tokens, ends[ends < len(tokens)])
    samples, current = [], []
    for line in lines:
        pieces = [line[i:i + cap] for i in range(0, len(line), cap)]
        for piece in pieces:
            if current and sum(map(len, current)) + len(piece) > cap:
                samples.append(np.concatenate(current))
                current = []
            current.append(piece)
        if len(line) == 1 and line[0] == newline and current:  # a blank line ends the paragraph
            samples.append(np.concatenate(current))
            current = []
    if current:
        samples.append(np.concatenate(current))
    return [sample for sample in samples if len(sample) >= 2]


def split_corpus(samples, fraction=VALIDATION_FRACTION):
    """``(train, validation)``: the samples before the last ``fraction`` of them, and those.

    Example:
        >>> train, validation = split_corpus(list(range(20)))
        >>> len(train), validation
        (18, [18, 19])
    """
    held_out = max(1, int(round(len(samples) * fraction)))
    return samples[:-held_out], samples[-held_out:]


# A small grammar in the corpus's shape (a speaker's name, lines, a blank line):
# spelling, word order and layout are there to learn, and nothing else.
SPEAKERS = ("KING", "QUEEN", "FOOL", "LORD", "NURSE")
SUBJECTS = ("the king", "my lord", "thy heart", "the queen", "a fool", "this night", "our fortune")
VERBS = ("doth love", "shall see", "hath lost", "will keep", "must fear", "did call")
OBJECTS = ("the crown", "his honour", "my heart", "the sea", "thy name", "a sword", "the morning")


def synthetic_text(size, seed=0):
    """A learnable text of about ``size`` bytes (whole speeches): speakers and sentences from a small grammar.

    The same ``size`` and ``seed`` give the same text.

    Example:
        >>> print(synthetic_text(60, seed=1), end="")
        FOOL:
        This night did call the crown.
        This night did call his honour.
        <BLANKLINE>
    """
    rng = np.random.default_rng(seed)
    speeches, written = [], 0
    while written < size:
        lines = [f"{SPEAKERS[rng.integers(len(SPEAKERS))]}:"]
        for _ in range(rng.integers(1, 4)):
            words = [part[rng.integers(len(part))] for part in (SUBJECTS, VERBS, OBJECTS)]
            lines.append(f"{words[0][0].upper()}{' '.join(words)[1:]}{'.!?'[rng.integers(3)]}")
        speech = "\n".join(lines) + "\n\n"
        speeches.append(speech)
        written += len(speech)
    return "".join(speeches)
