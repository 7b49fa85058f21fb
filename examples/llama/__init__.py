"""A Llama-style decoder whose every op is a schedgen kernel (issue 43): config, specs, model, run (README: "A Llama
model on schedgen kernels")."""
