"""A kernel and its variants: the spec that states the math, shapes, tolerances and remedies (``spec``), where the
workspace's and the built-in kernels are found (``registry``), a variant module and its knobs (``variants``),
the passes a trial times (``passes``), and where a variant runs, a GPU or the Triton interpreter (``device``,
``interpreter``). (The built-in kernels themselves are the package's data, the folder ``kernels``.)"""
