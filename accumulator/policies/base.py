"""What a window policy is: one optional behaviour of the Accumulator, as one small object.

The Accumulator's core sums micro-batches and closes each window in fixed
stages, whichever public call closes it (``Accumulator.end_window``, which
``step()`` runs, ``Accumulator.flush`` or the in-graph call:
docs/how-it-works.md#the-window-protocol); a policy takes part in the stages
it defines, and the core calls only those. No other attribute of a policy may
bear a hook's name (``attach`` refuses it). Clipping, loss scaling, non-finite
and spike skipping, noise tracking and BatchNorm's window statistics are
each one policy, in a module of their own; write your own by subclassing
``Policy`` (docs/policies.md).

The window's summary handed to ``factor``, ``gate`` and ``close_window`` (``summary``) is a
dict of Tensors, each computed once however many policies read it:

* ``"norm"``: the global norm of the window's gradient as the optimizer would
  get it before any ``factor`` (the mean, unscaled); present when a policy
  sets ``needs_norm``;
* ``"finite"``: True when the window's gradient holds no NaN or Inf; present
  when a policy sets ``needs_finite``;
* ``"total"``: the mean's divisor, the window's micro-steps or sum of counts;
* ``"unscale"``: what the summed gradients are multiplied by to undo loss
  scaling (1.0 without it);
* ``"nonempty"``: False for a window closed with nothing in it (``flush``);
* ``"applied"``: in ``close_window`` only: True when the update runs.
"""
import mindspore as ms

HOOKS = ("keep", "add", "count", "sample_last", "unscale", "factor", "gate", "close_window", "after_update")


@ms.jit_class
class Policy:
    """A window policy: override the hooks it needs; each runs inside the compiled step.

    Per micro-batch (``flats`` are its gradients packed as the buffers are):

    * ``keep(flats)``: a bool Tensor, False to leave the micro-batch out of the sum;
    * ``add(flats, count, kept)``: after the add; ``count`` the micro-batch's
      samples (or None), ``kept`` a bool Tensor;
    * ``count(steps, weight, kept)``: when micro-batches are counted: int32
      ``steps``, their float32 ``weight`` (samples, or steps), ``kept`` steps;
    * ``sample_last(flats, count, kept, buffers, total)``: for the window's
      last micro-batch only, after it is added and counted.

    Once per window, in this order:

    * ``unscale()``: a scalar the window's sum is multiplied by to undo what the
      gradients carry (a loss scale), before the summary;
    * ``factor(summary)``: a scalar the update is multiplied by (clipping);
    * ``gate(summary)``: a bool Tensor, False to skip the window;
    * ``close_window(tensors, summary)``: the window's end, its own
      ``window_tensors()`` reduced across devices; ``summary["applied"]``
      says whether the update runs. It must not branch on Tensors (use
      ``ops.select``).

    After the optimizer step, once per applied window only (never for a
    skipped or empty one): ``after_update()``, the weights updated (a weight
    average: ``accumulator.policies.ema``).

    ``state_parameters()`` returns the Parameters a checkpoint holds and
    ``window_tensors()`` the Tensors summed across devices with the window.
    Hooks run without a branch, so a policy costs what its kernels cost.

    Example:
        >>> from mindspore import Parameter, Tensor, nn, ops
        >>> from accumulator import Accumulator
        >>> class CountSkips(Policy):
        ...     def __init__(self):
        ...         self.skips = Parameter(Tensor(0, ms.int32), name="skips", requires_grad=False)
        ...     def state_parameters(self):
        ...         return [self.skips]
        ...     def close_window(self, tensors, summary):
        ...         ops.assign_add(self.skips, ops.logical_not(summary["applied"]).astype(ms.int32))
        >>> net = nn.Dense(3, 1)
        >>> accumulator = Accumulator(nn.SGD(net.trainable_params(), 0.1), 2, policies=[CountSkips()])
        >>> _ = accumulator.accumulate(tuple(ops.ones_like(p) for p in net.trainable_params()))
        >>> bool(accumulator.flush()), int(accumulator.policies[-1].skips)
        (True, 0)
    """

    needs_norm = False
    needs_finite = False

    def state_parameters(self):
        return []

    def window_tensors(self):
        return ()

    def keep(self, flats):
        return None

    def add(self, flats, count, kept):
        return None

    def count(self, steps, weight, kept):
        return None

    def sample_last(self, flats, count, kept, buffers, total):
        return None

    def unscale(self):
        return None

    def factor(self, summary):
        return None

    def gate(self, summary):
        return None

    def close_window(self, tensors, summary):
        return None

    def after_update(self):
        return None


def takes_part(policy, hook):
    """True when ``policy`` defines ``hook`` itself: the core calls a hook only on the policies that define it.

    Example:
        >>> class Clip(Policy):
        ...     def factor(self, summary):
        ...         return 0.5
        >>> takes_part(Clip(), "factor"), takes_part(Clip(), "gate")
        (True, False)
    """
    method = getattr(type(policy), hook, None)
    return method is not None and method is not getattr(Policy, hook)
