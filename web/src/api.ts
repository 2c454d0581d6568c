// The shapes the Go server sends (kube/dashboard and kube/inspect): keep in step with them.

export interface Holder { pod: string; share: number }
// MIGInstance is one instance of a GPU in MIG mode (kube/inspect.MIGInstance): its profile
// at its first memory slice, held by pod, being made for it, or idle.
export interface MIGInstance { profile: string; start: number; slices: number; share: number; uuid?: string; pod?: string; making?: boolean; inUse?: boolean }
// MIGLayout is a GPU in MIG mode, given out only as its instances: laid out by Allot
// (dynamic) or by an admin (fixed).
export interface MIGLayout { model: string; dynamic: boolean; memorySlices: number; memoryMi: number; instances: MIGInstance[] }
export interface GPU {
  index: number; used: number; holders?: Holder[]; freeMemoryMi: number; utilization?: number; uuid?: string; unhealthy?: string; cordoned?: string;
  mig?: MIGLayout;
}
// Place is a node's domain at one level of the cluster's Topology, widest level first.
export interface Place { level: string; domain: string }
export interface Node {
  name: string; pool?: string; model: string; gpus: GPU[]; allocated: number; gpuMemoryMi: number; topology?: Place[];
  sharing?: string; sharingWarning?: string; agent?: string;
  // The loosest compute mode the node's sharing pods run in (capped, fair, shared).
  compute?: string;
  // accelerator is the kind of another vendor's devices the node has ("ascend"); absent
  // for NVIDIA's GPUs.
  accelerator?: string;
}

export interface Pod { name: string; node?: string; gpus?: string; gpusRequested: number; phase: string; reason?: string }
export interface Workload {
  name: string; namespace: string; kind: string; queue: string; type: string; status: string;
  gpusAllocated: number; gpusRequested: number; running: number; pending: number;
  nodes: string[]; created: string; reason?: string; pods?: Pod[];
  // idleSince: since when every GPU it holds has been idle (kube/idle); idleSuspended: why
  // its queue's idleTimeout stopped it.
  idleSince?: string; idleSuspended?: IdleSuspension;
  // createdBy: who created it (allot.dev/created-by, written by Allot's webhook);
  // runningSince: when the longest-running of its running pods started.
  createdBy?: string; runningSince?: string;
  // progress: how far it has come, in its owner's words (allot.dev/progress), as text.
  progress?: string;
  // gpuUse: how busy its whole GPUs are (mean percent) and the GPU memory it holds, as its
  // nodes' agents last reported (kube/inspect.GPUUse).
  gpuUse?: { utilization?: number; memoryUsedMi?: number; gpus: number };
}

export interface IdleSuspension { at: string; idleFor: string; threshold: number; queue: string; class: string }

// idleSentence says why a workload was stopped for being idle, as allot describe does.
export function idleSentence(s: IdleSuspension): string {
  const verb = s.class === "inference" ? "scaled to zero" : "suspended";
  // Go writes durations as 2h0m0s: drop the zero units at the end.
  const d = s.idleFor.replace(/([hm])0s$/, "$1").replace(/h0m$/, "h");
  return `${verb} after ${d} idle (GPU utilisation under ${s.threshold}%, queue ${s.queue}'s idleTimeout)`;
}

export interface Queue {
  name: string; parent?: string; depth: number; priority: number; quota: number; weight: number; limit?: number;
  fairShare: number; allocated: number; borrowed: number; allocatedNonPreemptible: number;
  pastUseGPUHours?: number;
  requested: number; pendingGPUs: number; running: number; pending: number;
  accelerators?: KindRow[];
  pools?: KindRow[];
}

// KindRow is a queue's devices of another vendor's kind, or its GPUs of a node pool
// divided apart (kube/dashboard.KindRow).
export interface KindRow {
  kind: string; resource: string; quota: number; limit?: number; fairShare: number; allocated: number; requested: number;
}

export interface Sample { time: string; gpus: number; allocated: number; idleAllocated: number; queues: Record<string, { allocated: number; fairShare: number }> }

export interface Totals {
  gpus: number; allocated: number; idle: number; nodes: number; running: number; pending: number;
  sharedGPUs: number; pendingPods: number; runningPods: number; idleAllocated: number; reporting: number;
}

// IdleBelow is the server's threshold (kube/dashboard.IdleBelow): an allocated GPU less busy
// than this, in percent, is idle-allocated.
export const IdleBelow = 5;

export interface State {
  version: number; time: string; totals: Totals; queues: Queue[]; nodes: Node[]; workloads: Workload[]; history: Sample[];
}

export interface Step { time: string; what: string; message?: string; pods?: number }
export interface Event { time: string; type: string; reason: string; object: string; message: string; count: number }
export interface Detail { workload: Workload; events: Event[]; timeline: Step[] }

// fmt shows a GPU count: whole numbers plain, fractions with up to two decimals.
export function fmt(n: number): string {
  return Number.isInteger(n) ? String(n) : n.toFixed(2).replace(/0+$/, "").replace(/\.$/, "");
}

// age says how long ago, as kubectl does: 45s, 12m, 3h, 2d.
export function age(iso: string, now: Date): string {
  const s = Math.max(0, Math.floor((now.getTime() - new Date(iso).getTime()) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

// OtherNamespace is the holder the server shows, to someone signed in, for a pod of a
// namespace they may not read (kube/dashboard.OtherNamespace).
export const OtherNamespace = "in use by another namespace";

// Me is /api/me: who the dashboard acts for (empty without sign-in) and whether the pages
// offer to sign out.
export interface Me {
  user?: string;
  signOut?: boolean;
  // writes: the console submits and changes workloads, as this person.
  writes?: boolean;
  // connect: the pages offer to open a workload's tool through the console's connect
  // address (kube/dashboard/connect.go).
  connect?: boolean;
}
