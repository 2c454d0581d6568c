"""A small training loop for the elastic run on the real node (kube/realnode/elastic_test.go).

torchrun starts one process per worker pod; the group is formed by torchrun's c10d
rendezvous, and formed again each time workers come or go. The loop saves a checkpoint
each step (rank 0, to a directory the pods share) and goes on from it after a change of
membership, printing each step with the size of its group.
"""
import os, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
ckpt = os.environ.get("CKPT", "/ckpt") + "/last.pt"
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"] + 1
print(f"rank {rank} of {world}: from step {start}", flush=True)
for step in range(start, 1000000):
    x = torch.randn(16, 8)
    loss = torch.nn.functional.mse_loss(ddp(x), x.sum(1, keepdim=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".new")
        os.replace(ckpt + ".new", ckpt)
    print(f"step {step} world {world} rank {rank} loss {loss.item():.4f} at {time.strftime('%H:%M:%S')}", flush=True)
    time.sleep(0.3)
