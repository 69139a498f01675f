"""Train a small causal transformer on text with exact token-weighted gradient accumulation, then sample from it.

Tiny Shakespeare (about 1 MB, downloaded once) as byte tokens, in samples
of varying length split at paragraph and line ends; every micro-batch's
summed token loss is divided by the tokens the whole window held, so a
window of ``--accumulate-step`` micro-batches updates the weights exactly
as one large batch would. Per epoch: validation loss and perplexity,
tokens/s, tokens per update; at the end a sample of generated text. This
file only runs: its flags are ``training.lm_command``, the run ``training``.

Examples:
    python scripts/train_lm.py                          # Tiny Shakespeare, downloaded once
    python scripts/train_lm.py --synthetic              # offline, a learnable generated text
    python scripts/train_lm.py --ckpt-dir runs/lm --epochs 10 --resume
    python scripts/train_lm.py --synthetic --loss micro-batch-mean   # the naive mean of micro-batch means
    python scripts/train_lm.py --synthetic --no-packing # one sample per row, padded: about half the rows padding

From Python (the tests import it as ``scripts.train_lm``):
    >>> config, flags = parse_args(["--synthetic", "--accumulate-step", "8"])
    >>> config.batch_description(), flags["loss"], flags["packing"]
    ('5 x 8 = effective 40', 'token-sum', True)
"""
import os
import sys

# Run from the checkout: sys.path[0] is scripts/, and training/, models/ and data/ may not be installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training.interrupts import hold_signals  # noqa: E402

if __name__ == "__main__":
    # Before numpy and MindSpore start threads, so that every thread holds
    # SIGINT and SIGTERM for main(), which receives them (training.interrupts).
    hold_signals()

from data.text import TextUnavailableError  # noqa: E402
from training.command import run_tool  # noqa: E402
from training.lm import PROMPT, SAMPLE_TEMPERATURE, generate, lm_task_from_flags, prepare_text  # noqa: E402
from training.lm_command import parse_args  # noqa: E402
from training.loop import averaged, train  # noqa: E402
from training.memory import plan_run  # noqa: E402


def main(argv=None):
    """Command-line entry point; returns the summary dict.

    Failures the user can fix (no network, missing device, unwritable
    outputs, unusable checkpoints) print one ``error:`` line to stderr and
    exit 1, before any training. Ctrl-C or SIGTERM ends the run with 130
    or 143 and a line saying how to resume; the temporary ``--synthetic``
    folder is removed and the last checkpoint stays whole.
    """
    config, flags = parse_args(argv)

    def body(config, stack):
        path = prepare_text(flags["data_dir"], flags["synthetic"], flags["text_url"], stack)
        config = plan_run(config, lm_task_from_flags, (path, flags))
        task = lm_task_from_flags(path, flags)
        summary, run = train(config, task)
        if flags["sample_tokens"] and config.main_rank:
            with averaged(run):  # --ema: the sample is the average's, as the evaluation is
                text = generate(run.net, PROMPT, flags["sample_tokens"])
            weights = "" if config.ema is None else " with the weights' moving average"
            print(f"sample from {PROMPT!r}, at temperature {SAMPLE_TEMPERATURE}{weights}:\n{text}")
        return summary

    return run_tool(config, argv, __file__, body, errors=(TextUnavailableError,))


if __name__ == "__main__":
    main()
