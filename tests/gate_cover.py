"""A cheaper cover of the interpreter gate for tests that run it on many variants."""


def pairwise_cases(spec, suite):
    """Each check shape in each casting config once, the dtype alternating: every pair of a shape, a dtype and a
    config meets in some case, at half the cases of the whole gate (whose tallest shape, 1021 rows, is most of
    the interpreter's time). The row and column paths an algorithm adds are met in every casting mode and dtype."""
    shapes, dtypes = list(spec.check_shapes[suite]), list(spec.dtypes[suite])
    chosen = []
    for i, shape in enumerate(shapes):
        for j, config in enumerate(spec.check_configs):
            dtype = dtypes[(i + j) % len(dtypes)]
            chosen.append(next(c for c in spec.cases(suite, "check")
                               if c.shape == tuple(shape) and c.dtype == dtype and c.config == dict(config)))
    return chosen
