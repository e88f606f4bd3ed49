"""poolserve's runtime: TensorFlow GraphDefs on numpy kernels.

Layers, in processing order: ``tensor`` (TensorProto <-> numpy) -> ``graph`` (parse, validate, prune) ->
``kernels`` -> ``executor`` (plans and steps) -> ``session`` (signature cache, RunOptions, RunMetadata) ->
``run_handler`` (cross-session scheduling) -> ``timeline`` (Chrome traces). The public names are re-exported
by the top-level ``poolserve`` package.
"""
