/*
 * A stand-in for the NVIDIA driver's libnvidia-ml.so.1 on the real-node rig, which has no
 * driver: it answers, through NVML's own C interface, what a healthy idle GPU's NVML
 * answers to the calls Allot's agent makes (count, handles, UUID, name, memory, load, its
 * processes, error events), for the GPUs the rig made. It is mounted into containers given
 * the management CDI device, as nvidia-ctk's spec mounts the driver's library, so that the
 * chart's agent container runs its real NVML path (go-nvml's dlopen, cgo calls) unchanged.
 *
 * The GPUs come from the file the rig mounts beside the library (GPUS_FILE), or from
 * ALLOT_RIG_NVML where that is set, in one format:
 *   "<uuid>|<name>|<memory MiB>;<uuid>|<name>|<memory MiB>;..."
 * Every other function NVML exports is defined by stubs.c (generated from go-nvml's
 * nvml.h) and answers NVML_ERROR_NOT_SUPPORTED, as a driver does for what a device lacks.
 *
 * What it cannot show: anything the driver really does (memory held by a process, MIG,
 * MPS, XID errors). Those wait for a machine with a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 16
#define EVENT_DOUBLE_BIT_ECC 0x2ULL
#define EVENT_XID_CRITICAL 0x8ULL

struct nvmlDevice_st {
	unsigned int index;
	char uuid[96];
	char name[96];
	unsigned long long memory; /* bytes */
};
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { int unused; } *nvmlEventSet_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

static struct nvmlDevice_st gpus[MAX_GPUS];
static unsigned int gpuCount;
static int initialised;

#define GPUS_FILE "/run/allot-rig/nvml-gpus"

/* load reads the node's GPUs; without them this is a library with no driver behind it. */
static nvmlReturn_t load(void) {
	char file[4096] = "";
	const char *spec = getenv("ALLOT_RIG_NVML");
	if (spec == NULL || *spec == '\0') {
		FILE *f = fopen(GPUS_FILE, "r");
		if (f == NULL)
			return NVML_ERROR_DRIVER_NOT_LOADED;
		size_t n = fread(file, 1, sizeof file - 1, f);
		fclose(f);
		file[n] = '\0';
		file[strcspn(file, "\n")] = '\0';
		spec = file;
	}
	char *copy = strdup(spec), *save = NULL;
	if (copy == NULL)
		return NVML_ERROR_UNKNOWN;
	gpuCount = 0;
	for (char *g = strtok_r(copy, ";", &save); g != NULL && gpuCount < MAX_GPUS; g = strtok_r(NULL, ";", &save)) {
		char *f = NULL, *uuid = strtok_r(g, "|", &f), *name = strtok_r(NULL, "|", &f), *mib = strtok_r(NULL, "|", &f);
		if (uuid == NULL || name == NULL || mib == NULL)
			continue;
		struct nvmlDevice_st *d = &gpus[gpuCount];
		d->index = gpuCount;
		strncpy(d->uuid, uuid, sizeof d->uuid - 1);
		strncpy(d->name, name, sizeof d->name - 1);
		d->memory = strtoull(mib, NULL, 10) << 20;
		gpuCount++;
	}
	free(copy);
	initialised = 1;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return load(); }
nvmlReturn_t nvmlInit(void) { return load(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return load(); }
nvmlReturn_t nvmlShutdown(void) { initialised = 0; return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t r) {
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	default: return "Unknown Error";
	}
}

static nvmlReturn_t copy(char *dst, unsigned int length, const char *src) {
	if (dst == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(src) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	strcpy(dst, src);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int length) { return copy(v, length, "rig-stand-in"); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int length) { return copy(v, length, "rig-stand-in"); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { if (v == NULL) return NVML_ERROR_INVALID_ARGUMENT; *v = 0; return NVML_SUCCESS; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (n == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	*n = gpuCount;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return nvmlDeviceGetCount_v2(n); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (d == NULL || i >= gpuCount) return NVML_ERROR_INVALID_ARGUMENT;
	*d = &gpus[i];
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { return nvmlDeviceGetHandleByIndex_v2(i, d); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (uuid == NULL || d == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned int i = 0; i < gpuCount; i++)
		if (strcmp(gpus[i].uuid, uuid) == 0) {
			*d = &gpus[i];
			return NVML_SUCCESS;
		}
	return NVML_ERROR_NOT_FOUND;
}

/* valid says whether d is one of this library's handles. */
static int valid(nvmlDevice_t d) { return initialised && d >= gpus && d < gpus + gpuCount; }

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
	if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
	return copy(uuid, length, d->uuid);
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
	if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
	return copy(name, length, d->name);
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i) {
	if (!valid(d) || i == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	*i = d->index;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *m) { return nvmlDeviceGetIndex(d, m); }

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	if (!valid(d) || m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	m->total = d->memory;
	m->free = d->memory;
	m->used = 0;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
	if (!valid(d) || u == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	u->gpu = 0;
	u->memory = 0;
	return NVML_SUCCESS;
}

/* No process runs on a GPU no driver drives: every list is empty. */
static nvmlReturn_t noProcesses(nvmlDevice_t d, unsigned int *count, void *infos) {
	(void)infos;
	if (!valid(d) || count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	*count = 0;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *n, void *p) { return noProcesses(d, n, p); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, void *p) { return noProcesses(d, n, p); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, void *p) { return noProcesses(d, n, p); }
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *n, void *p) { return noProcesses(d, n, p); }
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, void *p) { return noProcesses(d, n, p); }
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, void *p) { return noProcesses(d, n, p); }
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t d, unsigned int *n, void *p) { return noProcesses(d, n, p); }
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, void *p) { return noProcesses(d, n, p); }
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, void *p) { return noProcesses(d, n, p); }

/* Error events: every device delivers them, and none is ever raised. */
static int eventSet;
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	*set = (nvmlEventSet_t)&eventSet;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
	if (!valid(d) || types == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	*types = EVENT_DOUBLE_BIT_ECC | EVENT_XID_CRITICAL;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
	(void)types;
	if (!valid(d) || set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, void *data, unsigned int timeoutms) {
	(void)data;
	if (set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
	struct timespec d = {.tv_sec = timeoutms / 1000, .tv_nsec = (long)(timeoutms % 1000) * 1000000L};
	nanosleep(&d, NULL);
	return NVML_ERROR_TIMEOUT;
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, void *data, unsigned int timeoutms) { return nvmlEventSetWait_v2(set, data, timeoutms); }
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { (void)set; return NVML_SUCCESS; }
