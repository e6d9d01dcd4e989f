"""Tools on top of the pipeline: bench, the docs experiments, smoke, scratch repositories, review."""
