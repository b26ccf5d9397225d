"""Keras layers of the model beside modeling.py and adapter_layers.py: BERT's
fast Dropout and TokenDense (ops), the classifier head (head) and
AdapterFusion (fusion). The model layer: they import no command."""
