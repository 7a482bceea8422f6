"""Checkpoint conversions: RoBERTa -> longformer_roberta, and longformer_roberta -> HF transformers."""
