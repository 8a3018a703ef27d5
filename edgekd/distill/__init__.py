"""Distillation: losses, the teacher-logit cache and the training loop."""
