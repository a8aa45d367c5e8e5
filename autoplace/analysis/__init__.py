"""Planning questions on top of the search and the cost model: GPU-count sweeps with time to train
and cost (`sweep`), side-by-side plan comparison (`compare`), the pipeline schedule as a timeline
(`schedule`), and the shared training-spec and explanation helpers the CLI renders."""
