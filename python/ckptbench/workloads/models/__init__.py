"""Model configs (OLMoE-1B-7B-0924, Llama-3.1-8B and scaled variants), builders, synthetic state.

Submodules: ``configs`` (specs, no torch), ``builder`` (meta-device models), ``seeded``
(layout-independent values), ``state`` (materialize, AdamW state, state dict, checksums).
"""
