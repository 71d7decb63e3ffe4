"""mixserve's PyTorch reference: every mixer in parallel and recurrent form, the model format,
the cost model, the trainer and the golden-fixture generator. Runs on Debian's python3-torch
(1.13, CPU) and on newer PyTorch with CUDA."""
