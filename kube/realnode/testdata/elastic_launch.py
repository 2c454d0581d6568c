"""torchrun for a worker of the PyTorchJob run on the real node (kube/realnode/pytorchjob_test.go).

The rank 0 agent tells the others to reach it at its fully qualified host name, the pod's
name, which only a cluster's DNS resolves; the real node has none. Here the agent gives its
pod's address (POD_IP, from the downward API) instead. Nothing else of torchrun changes: its
options come from the PET_ variables the training operator set.
"""
import os
import sys

from torch.distributed.elastic.agent.server import api

api._get_fq_hostname = lambda: os.environ["POD_IP"]

from torch.distributed.run import main  # noqa: E402

sys.argv = ["torchrun", "/work/train.py"]
main()
