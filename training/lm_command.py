"""``scripts/train_lm.py``'s command line: its flags, read into ``(TrainConfig, tool flags)``.

The script is its front end.
"""
import argparse

from data.text import DEFAULT_TEXT_DIR
from training.arguments import int_at_least, non_negative_int, one_of, positive_int
from training.command import make_parser, parse_config
from training.lm import LOSSES, MAX_LENGTH, PROMPT, SAMPLE_TOKENS, SYNTHETIC_BYTES

OPTIMIZERS = ("adamw", "adam", "sgd", "momentum")
DEFAULTS = dict(batch_size=5, accumulate_step=4, epochs=3, lr=1e-2, optimizer="adamw")
# --batch-size's default with --no-packing: one sample per row. Packed rows hold several, so 5 of them take about
# the tokens of 8 padded rows: the default window updates on the same tokens either way (docs/language-model-tool.md).
PADDED_BATCH_SIZE = 8
# The flags that are not TrainConfig fields: the data, the model and the loss.
TOOL_FLAGS = ("data_dir", "synthetic", "text_url", "width", "depth", "heads", "max_length", "packing",
              "pack_within_windows", "loss", "sample_tokens")
# Those that change the samples, the network or the arithmetic: a resumed run must repeat them.
RUN_FLAGS = ("width", "depth", "heads", "max_length", "packing", "pack_within_windows", "loss")


def build_parser():
    """The argument parser: ``training.command``'s flags and this tool's data, model and loss flags.

    Example:
        >>> build_parser().parse_args([]).loss
        'token-sum'
    """
    parser, data = make_parser(
        "train_lm.py", "Train a small causal transformer on text with gradient accumulation that equals the "
        "large batch token for token, then sample from it. Each optimizer update averages the gradient over "
        "the tokens of batch-size x accumulate-step rows.", OPTIMIZERS, DEFAULTS, sample="row",
        run_flags=RUN_FLAGS)
    data.add_argument("--data-dir", default=None, metavar="DIR",
                      help=f"folder with input.txt; Tiny Shakespeare is downloaded into it when missing "
                           f"(default {DEFAULT_TEXT_DIR}; with --synthetic a temporary folder)")
    data.add_argument("--synthetic", action="store_true",
                      help=f"no download: a learnable generated text of {SYNTHETIC_BYTES:,} bytes, written into "
                           "--data-dir (marked as synthetic) unless it is already there")
    # Hidden: a mirror of the corpus, and the tests' way to simulate being offline.
    data.add_argument("--text-url", default=None, help=argparse.SUPPRESS)
    data.add_argument("--max-length", type=int_at_least(2, "an integer of at least 2"), default=MAX_LENGTH, metavar="N",
                      help="tokens (bytes) per sample at most, and per row; samples end at paragraph or line "
                           "ends (default %(default)s)")
    data.add_argument("--packing", action=argparse.BooleanOptionalAction, default=True,
                      help="pack several samples into each row of --max-length tokens, each attending to itself "
                           "alone (positions restart per sample), so rows hold padding only at their tail. "
                           f"--no-packing: one sample per row, padded, and --batch-size {PADDED_BATCH_SIZE} unless "
                           "given, the same tokens per update (default: packing)")
    data.add_argument("--pack-within-windows", action=argparse.BooleanOptionalAction, default=False,
                      help="with --packing: pack each sample only into a row of its own window "
                           "(batch-size x accumulate-step rows), so each window holds a run of consecutive samples "
                           "of the shuffled order; --no-pack-within-windows: first fit over the whole epoch, "
                           "which moves short samples forward by up to several windows (default: %(default)s)")

    model = parser.add_argument_group("model and loss")
    model.add_argument("--width", type=positive_int, default=64, metavar="N",
                       help="embedding width, a multiple of --heads (default %(default)s)")
    model.add_argument("--depth", type=positive_int, default=2, metavar="N",
                       help="transformer blocks (default %(default)s)")
    model.add_argument("--heads", type=positive_int, default=4, metavar="N",
                       help="attention heads (default %(default)s)")
    model.add_argument("--loss", type=one_of(*LOSSES), default="token-sum", metavar="{" + ",".join(LOSSES) + "}",
                       help="token-sum: each micro-batch's summed token loss, divided by the window's tokens "
                            "(equals the large batch); micro-batch-mean: each micro-batch's mean, averaged over "
                            "the window (the naive way: short sequences weigh more; for comparison) "
                            "(default %(default)s)")
    model.add_argument("--sample-tokens", type=non_negative_int, default=SAMPLE_TOKENS, metavar="N",
                       help=f"bytes of text to generate from {PROMPT!r} at the end, 0 for none (default %(default)s)")
    return parser


def parse_args(argv=None):
    """The checked flags as ``(TrainConfig, tool flags)``; errors exit with status 2 and a usage line.

    ``--batch-size`` defaults to ``DEFAULTS``' packed rows, or to
    ``PADDED_BATCH_SIZE`` with ``--no-packing``.

    Example:
        >>> config, flags = parse_args(["--batch-size", "16", "--synthetic", "--width", "32"])
        >>> config.effective_batch_size, flags["synthetic"], flags["width"]
        (64, True, 32)
        >>> parse_args([])[0].batch_size, parse_args(["--no-packing"])[0].batch_size
        (5, 8)
    """
    parser = build_parser()
    if not parser.parse_args(argv).packing:
        parser.set_defaults(batch_size=PADDED_BATCH_SIZE)
    config, flags = parse_config(parser, argv, TOOL_FLAGS, RUN_FLAGS)
    if flags["width"] % flags["heads"]:
        parser.error(f"--width {flags['width']} must be a multiple of --heads {flags['heads']}")
    if flags["pack_within_windows"] and not flags["packing"]:
        parser.error("--pack-within-windows bounds how packing moves samples, got --no-packing")
    return config, flags
