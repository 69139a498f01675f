"""Test-only: trains MNIST with per-epoch checkpoints as scripts/train_mnist.py does, for a test that kills it.

    python tests/training/checkpoint_worker.py DATA_DIR CKPT_DIR EPOCHS

Resumes when CKPT_DIR holds a checkpoint. Prints ``saving N`` just before
the checkpoint of epoch N is written through the tool's own save path
(``training.checkpoints.save_epoch_checkpoint``), so that the test can
send SIGKILL while the file is being written.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import training.loop  # noqa: E402
from training.checkpoints import find_checkpoints, save_epoch_checkpoint  # noqa: E402
from training.config import TrainConfig  # noqa: E402
from training.context import configure_context  # noqa: E402
from training.mnist import mnist_task  # noqa: E402
from training.outputs import check_outputs  # noqa: E402


def announced_save(run, config, epoch, history):
    print(f"saving {epoch}", flush=True)
    return save_epoch_checkpoint(run, config, epoch, history)


# lr 0.1, so that every epoch moves the weights well beyond float rounding; PyNative, so
# that none of the test's restarts waits for a graph to compile. The test's uninterrupted run takes them too.
SETTINGS = dict(mode="pynative", lr=0.1)


def main(data_dir, ckpt_dir, epochs):
    training.loop.save_epoch_checkpoint = announced_save
    config = configure_context(TrainConfig(**SETTINGS, epochs=int(epochs), ckpt_dir=ckpt_dir,
                                           resume=bool(find_checkpoints(ckpt_dir))))
    check_outputs(config)
    training.loop.train(config, mnist_task(data_dir), progress=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
