"""The float64 oracle the end-to-end tests compare the trainer against.

interpreter: evaluates any ONNX decoder graph in torch float64 with autograd.
reference_train: the reference training loop, with the trainer's flags.
"""
