"""The library's internals: the buffers' layout and kernels, constants, argument checks, the atomic write, the
CPU launch setting, what a MindSpore release can do, and the 0.2.0 import paths. Not public: import the
sub-packages instead."""
