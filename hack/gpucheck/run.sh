#!/usr/bin/env bash
# Issue 35 part 8: Allot's GPU paths on a real NVIDIA GPU, in one go, as root:
#   1. the agent's NVML code (allot agent inventory): inventory, load, health events;
#   2. an MPS control daemon started by allot mps-host, held to limits, with two clients;
#   3. HAMi-core built from source, its limits on a client (LD_PRELOAD, then
#      /etc/ld.so.preload as Allot's pods get it).
#   5. one HAMi-core cache for two containers of a pod: two clients, each in a PID
#      namespace of its own (both PID 1, as two containers' main processes are), sharing
#      CUDA_DEVICE_MEMORY_SHARED_CACHE under one limit: is the limit the pod's, together?
#   4. exact slices (issue 39): three HAMi-core clients each held to a third of the GPU's
#      memory at once, as NVML's total and as what is left after the driver's reserve; and a
#      client held only by HAMi-core's per-device variable (CUDA_DEVICE_MEMORY_LIMIT_0).
# Each step goes on when one before failed. STEPS picks steps ("0 3 4"; default all; step 3
# builds HAMi-core, which step 4 needs). Full log in $OUT/log.txt, the findings in
# $OUT/summary.txt and at the end of the output. What it showed: docs/gpu-nodes.md.
#
# Needs, under .gpucheck/ (ignored; built on the developer's machine, carried to the GPU):
#   allot.gz      the allot binary (cgo, x86-64), gzipped
#   hami-core/    HAMi-core's source (git archive of Project-HAMi/HAMi-core)
#   nvml-include/ nvml.h (go-nvml's copy), used only when the CUDA toolkit has none
set -u
STEPS=" ${STEPS:-0 1 2 3 4 5} "
want() { [[ $STEPS == *" $1 "* ]]; }
OUT=${OUT:-/tmp/gpucheck-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CLIENT=$REPO/hack/gpucheck/client.py
W=/tmp/gpucheck
rm -rf "$W"
mkdir -p "$W"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
result() { echo "RESULT: $*"; echo "$*" >>"$SUMMARY"; }
step() { echo; echo "=== $* ($(date +%T))"; }
show() { echo "\$ $*"; "$@"; local rc=$?; [ $rc -eq 0 ] || echo "(exit $rc)"; return $rc; }
export PATH=$PATH:/usr/local/nvidia/bin:/usr/local/cuda/bin
export PYTHONUNBUFFERED=1
find_tool() {
	command -v "$1" 2>/dev/null && return 0
	for d in /usr/local/nvidia/bin /usr/bin /usr/local/bin /usr/local/cuda/bin /usr/sbin; do
		[ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
	done
	return 1
}
SMI=$(find_tool nvidia-smi) || SMI=nvidia-smi
MPSCTL=$(find_tool nvidia-cuda-mps-control) || MPSCTL=
# The driver's libraries: where the loader's cache does not have them, the driver folder.
if ! ldconfig -p | grep -q 'libnvidia-ml.so.1 '; then
	for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
		[ -e "$d/libnvidia-ml.so.1" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
	done
fi

# waitready NAME PID…: until each client is at its barrier ($SYNC/NAME.ready) or gone.
waitready() {
	local names=$1
	shift
	for _ in $(seq 180); do
		local left=0 i=0
		for n in $names; do
			i=$((i + 1))
			local pid=${!i}
			[ -e "$SYNC/$n.ready" ] || ! kill -0 "$pid" 2>/dev/null || left=1
		done
		[ $left = 0 ] && return 0
		sleep 0.5
	done
}

CM_SET=0 HOSTPID= PIPE= PRELOAD_MADE=0
cleanup() {
	echo
	echo "=== cleanup ($(date +%T))"
	[ "$PRELOAD_MADE" = 1 ] && rm -f /etc/ld.so.preload && echo "removed /etc/ld.so.preload"
	if [ -n "$PIPE" ] && [ -n "$MPSCTL" ]; then
		echo quit | CUDA_MPS_PIPE_DIRECTORY=$PIPE timeout 10 "$MPSCTL" && echo "MPS control daemon quit"
	fi
	[ -n "$HOSTPID" ] && kill "$HOSTPID" 2>/dev/null && echo "allot mps-host stopped"
	if [ "$("$SMI" --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)" != Default ]; then
		timeout 20 "$SMI" -c DEFAULT
	fi
	echo "compute mode: $("$SMI" --query-gpu=compute_mode --format=csv,noheader 2>&1)"
	echo
	echo "=== summary"
	cat "$SUMMARY"
}
trap cleanup EXIT

step "0. the machine"
show uname -a
show "$SMI"
"$SMI" -q >"$OUT/nvidia-smi-q.txt" 2>&1
grep -E '^(Driver Version|CUDA Version)|Product Name|GPU UUID|Minor Number|Bus Id|MIG Mode|^ +Current +:|Compute Mode|Total +:|Used +:|NUMA' "$OUT/nvidia-smi-q.txt" | head -30
DRIVER=$("$SMI" --query-gpu=driver_version --format=csv,noheader | head -1)
MODEL=$("$SMI" --query-gpu=name --format=csv,noheader | head -1)
UUID=$("$SMI" --query-gpu=uuid --format=csv,noheader | head -1)
result "machine: $MODEL, driver $DRIVER, $(uname -r)"
echo "tools: nvidia-smi=$SMI mps-control=${MPSCTL:-none} nvcc=$(command -v nvcc) cmake=$(command -v cmake) gcc=$(command -v gcc)"
ls -la /usr/local/nvidia/bin 2>&1 | head -20
ldconfig -p | grep -E 'libnvidia-ml|libcuda\.' | head
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1 | tail -1
nvcc --version 2>&1 | tail -2
cmake --version 2>&1 | head -1
gcc --version 2>&1 | head -1

ROOT=$W/root
if want 1; then
step "1. the agent's NVML code"
ALLOT=$W/allot
if gzip -dc "$REPO/.gpucheck/allot.gz" >"$ALLOT" && chmod +x "$ALLOT" && "$ALLOT" --version; then
	show "$ALLOT" agent inventory --samples 1 | tee "$W/inv1.txt"
	if grep -q '"uuid":"'"$UUID"'"' "$W/inv1.txt"; then
		result "NVML inventory: $(grep -o 'inventory.*' "$W/inv1.txt")"
	else
		result "NVML inventory: did not name $UUID (see the log)"
	fi
	grep -o 'compute mode.*' "$W/inv1.txt" | head -1 | sed 's/^/NVML: /' | while read -r l; do result "$l"; done
	show "$SMI" --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,compute_mode,mig.mode.current --format=csv
	# Load and a fault while the agent samples and watches (stopped with SIGINT after).
	"$ALLOT" agent inventory --samples 12 --every 1s --watch 60s >"$W/inv2.txt" 2>&1 &
	INVPID=$!
	export SYNC=$W/sync-load
	mkdir -p "$SYNC"
	timeout 60 python3 "$CLIENT" load 5 &
	LOADPID=$!
	waitready load $LOADPID
	sleep 2
	show "$SMI" --query-gpu=utilization.gpu,memory.used --format=csv
	wait $LOADPID
	timeout 60 python3 "$CLIENT" baseline full
	timeout 60 python3 "$CLIENT" rate full 5 | tee "$W/rate-full.txt"
	result "no limit: $(cat "$W/rate-full.txt")"
	timeout 60 python3 "$CLIENT" fault
	sleep 3
	kill -INT $INVPID
	wait $INVPID
	cat "$W/inv2.txt"
	result "NVML samples: $(grep -o 'sample [0-9]*: utilization.*' "$W/inv2.txt" | sed 's/sample [0-9]*: utilization //; s/, lost \[\]//' | tr '\n' ';')"
	result "NVML events: $(grep -E 'raw event|WatchHealth' "$W/inv2.txt" | cut -c14- | tr '\n' ';')"
	echo "kernel log:"
	dmesg 2>&1 | grep -iE 'xid|nvrm' | tail -5
else
	result "NVML: the allot binary did not run"
fi
fi # step 1

if want 2; then
step "2. MPS: allot mps-host, a daemon held to 30% and 2048M, two clients"
# mps_try NAME ENV…: a control daemon on pipes of its own with that environment: does it
# start (-d), answer and quit; when it does not start, what it says in the foreground.
mps_try() {
	local name=$1 d=$W/mpsdiag-$(echo "$1" | tr -c "A-Za-z0-9\n" _)
	shift
	mkdir -p "$d/pipe" "$d/log"
	env "$@" CUDA_MPS_PIPE_DIRECTORY="$d/pipe" CUDA_MPS_LOG_DIRECTORY="$d/log" timeout 10 "$MPSCTL" -d
	local rc=$? answer=
	if [ $rc = 0 ]; then
		answer=$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY="$d/pipe" timeout 5 "$MPSCTL" 2>&1; echo "exit $?")
		echo quit | CUDA_MPS_PIPE_DIRECTORY="$d/pipe" timeout 5 "$MPSCTL"
	else
		env "$@" CUDA_MPS_PIPE_DIRECTORY="$d/pipe" CUDA_MPS_LOG_DIRECTORY="$d/log" timeout 3 "$MPSCTL" -f >"$d/foreground.txt" 2>&1
		echo "foreground (-f) exit $?:"
		cat "$d/foreground.txt"
	fi
	echo "control.log:"
	cat "$d/log/control.log" 2>&1 | tail -5
	result "MPS control daemon, $name: -d exit $rc; get_server_list: $(echo "$answer" | tr '\n' ' '); $(grep -v '^$' "$d/foreground.txt" 2>/dev/null | tail -1)"
}
if [ -z "$MPSCTL" ]; then
	result "MPS: nvidia-cuda-mps-control is not on this machine (PATH, /usr/local/nvidia/bin, /usr/bin)"
else
	mps_try "CUDA_VISIBLE_DEVICES unset" -u CUDA_VISIBLE_DEVICES
	mps_try "CUDA_VISIBLE_DEVICES empty" CUDA_VISIBLE_DEVICES=
	mps_try "CUDA_VISIBLE_DEVICES=<uuid>" CUDA_VISIBLE_DEVICES="$UUID"
	if timeout 20 "$SMI" -c DEFAULT; then CM_SET=1; else echo "nvidia-smi -c does not work here: the compute mode is left alone"; fi
	"$ALLOT" mps-host --sharing-root "$ROOT" --mps-control "$MPSCTL" --shm "" >"$W/mpshost.log" 2>&1 &
	HOSTPID=$!
	for _ in $(seq 60); do [ -e "$ROOT/mps/ready" ] && break; kill -0 $HOSTPID 2>/dev/null || break; sleep 0.5; done
	cat "$W/mpshost.log"
	PIPE=$ROOT/mps/$UUID/pipe
	LOGD=$ROOT/mps/$UUID/log
	ctl() { echo "$1" | CUDA_MPS_PIPE_DIRECTORY=$PIPE timeout 5 "$MPSCTL"; }
	mkdir -p "$ROOT/mps/$UUID"
	if [ -e "$ROOT/mps/ready" ]; then
		result "MPS: allot mps-host's probe daemon answered ($ROOT/mps/ready)"
		BY="allot mps-host"
		# What the agent writes for the host (wantMPSLimits): "<percent> <MiB>". The host
		# starts the GPU's daemon, sets its limits and the GPU's compute mode (NVML).
		printf '30 2048\n' >"$ROOT/mps/$UUID/wanted"
	else
		result "MPS: allot mps-host's probe daemon did not answer: $(tail -2 "$W/mpshost.log" | tr '\n' ' ')"
		# The same commands by hand (mpsCommand, holdMPS, setComputeMode).
		BY="the same commands by hand"
		kill "$HOSTPID" 2>/dev/null
		HOSTPID=
		mkdir -p "$PIPE" "$LOGD"
		CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$LOGD timeout 10 "$MPSCTL" -d
		echo "-d exit $?"
		[ "$CM_SET" = 1 ] && timeout 20 "$SMI" -c EXCLUSIVE_PROCESS
		ctl "set_default_active_thread_percentage 30"
		ctl "set_default_device_pinned_mem_limit 0 2048M"
	fi
	for _ in $(seq 40); do ctl "get_default_device_pinned_mem_limit 0" 2>/dev/null | grep -q 2048 && break; sleep 0.5; done
	if ! ctl get_server_list >/dev/null 2>&1; then
		result "MPS: no control daemon answers for the GPU ($BY): $(ctl get_server_list 2>&1 | tr '\n' ' ')"
		PIPE=
	else
		echo "\$ echo get_default_active_thread_percentage | nvidia-cuda-mps-control"
		ctl get_default_active_thread_percentage
		echo "\$ echo get_default_device_pinned_mem_limit 0 | nvidia-cuda-mps-control"
		ctl "get_default_device_pinned_mem_limit 0"
		result "MPS daemon ($BY) defaults: thread percentage $(ctl get_default_active_thread_percentage 2>&1), pinned limit $(ctl 'get_default_device_pinned_mem_limit 0' 2>&1); compute mode $("$SMI" --query-gpu=compute_mode --format=csv,noheader)"
		ps -eo pid,args | grep -E '[n]vidia-cuda-mps' || true
		export SYNC=$W/sync
		mkdir -p "$SYNC"
		# One client asks for more than the daemon holds, the other for less (as Allot's
		# environment does for a smaller pod).
		CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$LOGD CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M \
			timeout 75 python3 "$CLIENT" alloc wide 4096 1024 2048 >"$W/mps-wide.txt" 2>&1 &
		A=$!
		CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$LOGD CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=15 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M \
			timeout 75 python3 "$CLIENT" alloc narrow 4096 512 1024 >"$W/mps-narrow.txt" 2>&1 &
		B=$!
		waitready "wide narrow" $A $B
		echo "\$ echo get_server_list | nvidia-cuda-mps-control"
		SERVERS=$(ctl get_server_list)
		echo "$SERVERS"
		for s in $(echo "$SERVERS" | grep -E '^[0-9]+$'); do
			echo "\$ echo get_client_list $s | nvidia-cuda-mps-control"
			ctl "get_client_list $s"
			result "MPS: server $s serves clients $(ctl "get_client_list $s" | tr '\n' ' ')(client pids: wide $A's python, narrow $B's python)"
			echo "\$ echo get_active_thread_percentage $s | nvidia-cuda-mps-control"
			ctl "get_active_thread_percentage $s"
		done
		ps -eo pid,ppid,user,args | grep -E '[n]vidia-cuda-mps|[c]lient.py alloc'
		show "$SMI"
		show "$SMI" --query-compute-apps=pid,process_name,used_memory --format=csv
		"$ALLOT" agent inventory --samples 1 2>&1 | grep -E 'compute mode|sample'
		touch "$SYNC/done"
		wait $A $B
		echo "--- client wide (asks 100% and 8192M)"
		cat "$W/mps-wide.txt"
		echo "--- client narrow (asks 15% and 1024M)"
		cat "$W/mps-narrow.txt"
		for f in wide narrow; do
			grep -E 'multi_processor_count|allocated|allocation|TFLOP' "$W/mps-$f.txt" | while read -r l; do result "MPS $l"; done
		done
		echo "--- MPS logs"
		tail -15 "$LOGD/control.log" 2>&1
		tail -15 "$LOGD/server.log" 2>&1
		# As the agent does once the GPU is no longer shared: withdraw the wish, quit.
		rm -f "$ROOT/mps/$UUID/wanted"
		sleep 2
		echo quit | CUDA_MPS_PIPE_DIRECTORY=$PIPE timeout 10 "$MPSCTL" && PIPE=
		sleep 1
		[ "$BY" != "allot mps-host" ] && [ "$CM_SET" = 1 ] && timeout 20 "$SMI" -c DEFAULT >/dev/null
		result "MPS after: compute mode $("$SMI" --query-gpu=compute_mode --format=csv,noheader); $(ps -eo args | grep -c '[n]vidia-cuda-mps') MPS processes left"
	fi
	if [ -n "$HOSTPID" ]; then
		kill "$HOSTPID" 2>/dev/null
		wait "$HOSTPID" 2>/dev/null
		HOSTPID=
		cat "$W/mpshost.log"
	fi
	[ "$CM_SET" = 1 ] && timeout 20 "$SMI" -c DEFAULT >/dev/null
fi

fi # step 2

step "3. HAMi-core: built here, 4096m and 30% on a client"
H=$W/hami-core
cp -r "$REPO/.gpucheck/hami-core" "$H"
NVCC=$(command -v nvcc)
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "${NVCC:-/usr/local/cuda/bin/nvcc}")")")}
[ -e "$CUDA_HOME/include/cuda.h" ] || CUDA_HOME=/usr/local/cuda
echo "CUDA_HOME=$CUDA_HOME"; ls "$CUDA_HOME"/include/cuda.h "$CUDA_HOME"/include/nvml.h 2>&1
INC=
[ -e "$CUDA_HOME/include/nvml.h" ] || { INC="-I$REPO/.gpucheck/nvml-include"; echo "nvml.h from go-nvml's copy"; }
# Link against the driver's own libraries (HAMi-core links -lcuda -lnvidia-ml).
L=$W/link
mkdir -p "$L"
for lib in libcuda libnvidia-ml; do
	real=$(ldconfig -p | awk -v l="$lib.so.1" '$1 == l {print $NF; exit}')
	[ -z "$real" ] && for d in /usr/local/nvidia/lib64 "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs"; do
		[ -e "$d/$lib.so.1" ] && real=$d/$lib.so.1 && break
		[ -e "$d/$lib.so" ] && real=$d/$lib.so && break
	done
	echo "$lib: ${real:-not found}"
	[ -n "$real" ] && ln -sf "$real" "$L/$lib.so"
done
sed -i 's/^add_subdirectory(test)/#&/' "$H/CMakeLists.txt" # its tests need FindCUDA; the library does not
mkdir -p "$H/build"
LIB=
if (cd "$H/build" && cmake .. -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DDLSYM_HOOK_ENABLE=1 -DMULTIPROCESS_LIMIT_ENABLE=1 \
	-DHOOK_MEMINFO_ENABLE=1 -DHOOK_NVML_ENABLE=1 -DCMAKE_BUILD_TYPE=Debug \
	"-DCMAKE_C_FLAGS=-std=gnu17 -Wno-error=implicit-function-declaration -Wno-error=incompatible-pointer-types -Wno-error=int-conversion $INC" \
	"-DCMAKE_SHARED_LINKER_FLAGS=-L$L" >"$W/hami-cmake.txt" 2>&1 && make -j16 vgpu >"$W/hami-make.txt" 2>&1); then
	# Where Allot's agent puts it for sharing pods (v1alpha1.HAMiCoreLibrary).
	mkdir -p "$ROOT/hami-core"
	cp "$H/build/libvgpu.so" "$ROOT/hami-core/libvgpu.so"
	LIB=$ROOT/hami-core/libvgpu.so
	ls -la "$LIB"
	result "HAMi-core: built ($(grep -c warning "$W/hami-make.txt") warnings) with $(gcc --version | head -1), CUDA headers of $CUDA_HOME"
else
	tail -5 "$W/hami-cmake.txt"
	grep -E 'error' "$W/hami-make.txt" | head -20
	result "HAMi-core: the build failed: $(grep -m1 -E 'error|Error' "$W/hami-make.txt" "$W/hami-cmake.txt")"
fi
if [ -n "$LIB" ] && want 3; then
	mkdir -p /tmp/vgpulock
	rm -f /tmp/cudevshr.cache
	export SYNC=$W/sync-hami
	mkdir -p "$SYNC"
	# The variables Allot's scheduler writes for a pod of 4 GiB and 30% (gpuEnv).
	LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=4096m CUDA_DEVICE_SM_LIMIT=30 \
		timeout 75 python3 "$CLIENT" alloc hami 6144 3072 2048 >"$W/hami.txt" 2>&1 &
	A=$!
	waitready hami $A
	echo "\$ LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=4096m nvidia-smi --query-gpu=memory.total,memory.used --format=csv"
	LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=4096m CUDA_DEVICE_SM_LIMIT=30 timeout 30 "$SMI" --query-gpu=memory.total,memory.used --format=csv >"$W/hami-smi.txt" 2>&1
	cat "$W/hami-smi.txt"
	LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=4096m CUDA_DEVICE_SM_LIMIT=30 timeout 30 "$SMI" 2>&1 | head -25
	show "$SMI" --query-gpu=memory.total,memory.used --format=csv
	touch "$SYNC/done"
	wait $A
	cat "$W/hami.txt"
	grep -E 'multi_processor_count|allocated|allocation|TFLOP' "$W/hami.txt" | sed 's/pid [0-9]* env.*//' | while read -r l; do result "HAMi-core LD_PRELOAD $l"; done
	result "HAMi-core: nvidia-smi under the preload: $(grep -v '^\[HAMI' "$W/hami-smi.txt" | tr '\n' ' ')"
	# The SM limit over seconds (HAMi-core throttles launches from a watcher thread).
	rm -f /tmp/cudevshr.cache
	LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=4096m CUDA_DEVICE_SM_LIMIT=30 LIBCUDA_LOG_LEVEL=3 \
		timeout 40 python3 "$CLIENT" rate hami 8 >"$W/hami-rate.txt" 2>"$W/hami-rate-log.txt"
	cat "$W/hami-rate.txt"
	grep -E 'core utilization limit|util_switch|SET PID|HOST PID|userutil' "$W/hami-rate-log.txt" | head -4
	grep -E 'userutil' "$W/hami-rate-log.txt" | tail -4
	grep -ciE 'userutil' "$W/hami-rate-log.txt"
	result "HAMi-core LD_PRELOAD, SM limit 30: $(cat "$W/hami-rate.txt"); watcher: $(grep -E 'userutil' "$W/hami-rate-log.txt" | tail -1)"
	# As Allot's pods get it: the loader's own list, /etc/ld.so.preload.
	if [ -e /etc/ld.so.preload ]; then
		result "HAMi-core /etc/ld.so.preload: not tried, the file exists here"
	elif echo "$LIB" >/etc/ld.so.preload; then
		PRELOAD_MADE=1
		rm -f /tmp/cudevshr.cache "$SYNC"/*
		CUDA_DEVICE_MEMORY_LIMIT=4096m CUDA_DEVICE_SM_LIMIT=30 timeout 75 python3 "$CLIENT" alloc preload 6144 >"$W/hami-preload.txt" 2>&1 &
		A=$!
		waitready preload $A
		CUDA_DEVICE_MEMORY_LIMIT=4096m timeout 30 "$SMI" --query-gpu=memory.total,memory.used --format=csv >"$W/hami-preload-smi.txt" 2>&1
		touch "$SYNC/done"
		wait $A
		rm -f /etc/ld.so.preload && PRELOAD_MADE=0
		cat "$W/hami-preload.txt" "$W/hami-preload-smi.txt"
		grep -E 'multi_processor_count|allocated|TFLOP' "$W/hami-preload.txt" | sed 's/pid [0-9]* env.*//' | while read -r l; do result "HAMi-core ld.so.preload $l"; done
		result "HAMi-core ld.so.preload: nvidia-smi: $(grep -v '^\[HAMI' "$W/hami-preload-smi.txt" | tr '\n' ' ')"
	fi
fi

# hold NAME MIB LIMIT_ENV…: a client under HAMi-core holding up to MIB in 256 MiB blocks
# until the barrier, started in the background (its pid in $!).
hold() {
	local name=$1 mib=$2
	shift 2
	# A cache of its own, as each pod has its own /tmp: HAMi-core sums the use of every
	# process sharing one against the limit (a container's limit, not a process's).
	env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/$name.cache" "$@" \
		timeout 120 python3 "$CLIENT" hold "$name" "$mib" >"$W/$name.txt" 2>&1 &
}

# slices LABEL MIB: three clients each held to MIB at once; what each got.
slices() {
	local label=$1 mib=$2
	rm -f /tmp/cudevshr.cache
	export SYNC=$W/sync-$label
	mkdir -p "$SYNC"
	hold "$label-1" "$mib" CUDA_DEVICE_MEMORY_LIMIT="${mib}m"
	local a=$!
	hold "$label-2" "$mib" CUDA_DEVICE_MEMORY_LIMIT="${mib}m"
	local b=$!
	hold "$label-3" "$mib" CUDA_DEVICE_MEMORY_LIMIT="${mib}m"
	local c=$!
	waitready "$label-1 $label-2 $label-3" $a $b $c
	show "$SMI" --query-gpu=memory.total,memory.reserved,memory.used,memory.free --format=csv
	touch "$SYNC/done"
	wait $a $b $c
	for n in 1 2 3; do
		cat "$W/$label-$n.txt"
		result "exact slices, $label: client $n $(grep -E 'held' "$W/$label-$n.txt" | sed 's/^[^:]*: //')"
	done
}

if [ -n "$LIB" ] && want 4; then
	step "4. exact slices: three clients held to a third of the GPU each, at once"
	TOTAL=$("$SMI" --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
	RESERVED=$("$SMI" --query-gpu=memory.reserved --format=csv,noheader,nounits | head -1)
	[ -x "$W/allot" ] || gzip -dc "$REPO/.gpucheck/allot.gz" >"$W/allot" && chmod +x "$W/allot"
	show "$W/allot" agent inventory --samples 1 2>&1 | grep -iE 'memory|MiB' | head -5
	result "exact slices: nvidia-smi memory.total $TOTAL MiB, memory.reserved $RESERVED MiB"
	# What Allot books for three equal slices of the memory NVML reports (the agent's
	# inventory), and of what is left after the driver's reserve.
	slices total $((TOTAL / 3))
	slices usable $(((TOTAL - RESERVED) / 3))
	# A slice of several GPUs is held per device: HAMi-core's CUDA_DEVICE_MEMORY_LIMIT_<i>.
	rm -f /tmp/cudevshr.cache
	export SYNC=$W/sync-indexed
	mkdir -p "$SYNC"
	hold indexed 4096 CUDA_DEVICE_MEMORY_LIMIT_0=2048m
	A=$!
	waitready indexed $A
	touch "$SYNC/done"
	wait $A
	cat "$W/indexed.txt"
	result "HAMi-core, CUDA_DEVICE_MEMORY_LIMIT_0=2048m alone: $(grep -E 'held' "$W/indexed.txt" | sed 's/^[^:]*: //')"
fi

if [ -n "$LIB" ] && want 5; then
	step "5. one HAMi-core cache for two containers: two PID namespaces, one limit of 4096m"
	rm -f /tmp/cudevshr.cache
	export SYNC=$W/sync-pidns
	mkdir -p "$SYNC"
	CACHE=$W/pod.cache
	for n in c1 c2; do
		unshare --pid --fork --mount-proc env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$CACHE" CUDA_DEVICE_MEMORY_LIMIT=4096m \
			SYNC="$SYNC" timeout 120 python3 "$CLIENT" hold "$n" 3072 >"$W/$n.txt" 2>&1 &
		eval "P_$n=\$!"
		sleep 8 # the first holds its blocks before the second starts
	done
	waitready "c1 c2" "$P_c1" "$P_c2"
	show "$SMI" --query-gpu=memory.used --format=csv
	touch "$SYNC/done"
	wait "$P_c1" "$P_c2"
	cat "$W/c1.txt" "$W/c2.txt"
	for n in c1 c2; do
		result "one cache, two PID namespaces, 4096m: $n $(grep -E 'held|pid ' "$W/$n.txt" | sed 's/^[^:]*: //; s/ env .*//' | tr '\n' ' ')"
	done
fi
