"""The kernels in real models: a transformers model patched with the best kernels (``patch``), and training
steps timed side by side with and without them (``e2e``)."""
