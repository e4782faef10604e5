"""Classic online algorithms, a package per problem, installed as ``advonline.baselines.<name>``."""
