"""What a trial measures: CUDA-event timings with intervals (``timing``), accuracy against float64
(``accuracy``), Nsight Compute profiles (``ncu``, ``ncu_driver``, ``metrics``), the parallel precompilation that
keeps compile time out of the rest (``precompile``) and the stack it ran on (``fingerprint``)."""
