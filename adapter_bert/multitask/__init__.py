"""Several classification tasks on one frozen encoder: HyperFormer++ or shared adapters."""
