"""The torch side's loader of the standalone script (compare/standalone.py, which upstream drafts ship as repro.py):
written into that script, so it imports only the standard library and, inside, torch."""
from pathlib import Path


def torch_step(path: Path, op: str, compiled: bool, threads: int | None):
    """One call of the exported step (torch.export's `path`), synced: inference, grad, or an Adam step."""
    import torch  # the framework: only in the side's process

    if threads:
        torch.set_num_threads(threads)
    program = torch.export.load(path)
    tensors, batch = program.state_dict | program.constants, iter(program.example_inputs[0])
    # the graph itself, its weights and batch as its inputs: ep.module()'s input checks cost 70 us a call here
    specs = program.graph_signature.input_specs
    inputs = [next(batch) if s.kind.name == "USER_INPUT" else tensors[s.target] for s in specs]
    weights = [t for s, t in zip(specs, inputs) if s.kind.name == "PARAMETER" and t.requires_grad]
    graph = torch.compile(program.graph_module) if compiled else program.graph_module
    sync = torch.cuda.synchronize if inputs[-1].is_cuda else (lambda: None)
    if op == "inference":
        def call():
            with torch.no_grad():
                return graph(*inputs)
    elif op == "grad":  # the weights' gradients, or the input's where the weights are constants
        wrt = weights or [program.example_inputs[0][0].requires_grad_()]

        def call():
            return torch.autograd.grad(graph(*inputs)[-1], wrt, allow_unused=True)  # a tied weight is named twice
    else:  # training: one Adam step
        opt = torch.optim.Adam(weights, lr=1e-3, foreach=True)

        def call():
            opt.zero_grad(set_to_none=True)
            graph(*inputs)[-1].backward()
            opt.step()
    return lambda: (call(), sync())
