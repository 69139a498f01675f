from accumulator.accumulator import Accumulator
