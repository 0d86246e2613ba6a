// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Finds and dlopens the libcupti of the target's own CUDA runtime, resolves
 * every function used, and checks that its activity record layouts are ones
 * this library was compiled for.  Search order:
 *   1. TIMELINE_CUPTI_PATH (set by the recorder when it knows better);
 *   2. next to the libcudart the process loaded (PyPI wheels:
 *      nvidia/cuda_runtime/lib -> nvidia/cuda_cupti/lib/libcupti.so.12,
 *      CUDA 13: nvidia/cu13/lib/libcupti.so.13; toolkit: extras/CUPTI/lib64);
 *   3. CUDA_HOME / /usr/local/cuda toolkit dirs;
 *   4. dlopen("libcupti.so.N") through the loader path / ldconfig.
 * N is the runtime's major version (from the libcudart soname), else 13 and 12.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "inject.h"
#include "cupti_fns.h"

struct tl_cupti_fns tl_cupti;

/* API versions whose CONCURRENT_KERNEL/MEMCPY/MEMCPY2/MEMSET/RUNTIME/DRIVER/
 * SYNCHRONIZATION records have the layouts of the headers each decoder is
 * compiled with (checked field by field by tests/unit/test_gpu_inject.py where
 * several header sets are at hand).  Others: unsupported, library inert. */
struct layout_range { uint32_t lo, hi; int layout; };
static const struct layout_range layouts[] = {
	{ 26, 28, 12 },           /* CUDA 12.8, 12.9, 12.9 Update 1 (12.8.90 headers: same offsets) */
	{ 130000, 130001, 13 },   /* CUDA 13.0, 13.0 Update 1 (CUPTI headers 13.0.85) */
};
#ifndef TL_HAVE_V13
#define TL_HAVE_V13 0
#endif

struct find_ctx { char cudart_dir[4096]; int major; };
char tl_cupti_preloaded[1024];   /* a libcupti already in the process (e.g. torch's Kineto) */

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct find_ctx *c = data;
	const char *name = info->dlpi_name, *base, *slash;
	(void)size;
	if (!name || !*name)
		return 0;
	slash = strrchr(name, '/');
	base = slash ? slash + 1 : name;
	if (!strncmp(base, "libcupti.so", 11))
		snprintf(tl_cupti_preloaded, sizeof(tl_cupti_preloaded), "%s", name);
	if (!c->major && slash && !strncmp(base, "libcudart.so.", 13)) {
		c->major = atoi(base + 13);
		snprintf(c->cudart_dir, sizeof(c->cudart_dir), "%.*s", (int)(slash - name), name);
	}
	return 0;
}

static void *try_open(const char *path, char *out, size_t outlen)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h)
		snprintf(out, outlen, "%s", path);
	return h;
}

static void *find_and_open(int major, const char *cudart_dir, char *out, size_t outlen)
{
	char p[4200];
	const char *home = getenv("CUDA_HOME");
	void *h;

	if (cudart_dir && *cudart_dir) {
		const char *rel[] = { "../../cuda_cupti/lib", ".", "../extras/CUPTI/lib64", "../../extras/CUPTI/lib64" };
		for (size_t i = 0; i < sizeof(rel) / sizeof(*rel); i++) {
			snprintf(p, sizeof(p), "%s/%s/libcupti.so.%d", cudart_dir, rel[i], major);
			if (access(p, R_OK) == 0 && (h = try_open(p, out, outlen)))
				return h;
		}
	}
	const char *homes[] = { home, "/usr/local/cuda" };
	for (size_t i = 0; i < 2; i++) {
		if (!homes[i] || !*homes[i])
			continue;
		snprintf(p, sizeof(p), "%s/extras/CUPTI/lib64/libcupti.so.%d", homes[i], major);
		if (access(p, R_OK) == 0 && (h = try_open(p, out, outlen)))
			return h;
	}
	snprintf(p, sizeof(p), "libcupti.so.%d", major);
	return try_open(p, out, outlen);
}

/* Returns NULL when loaded and supported, else the reason (library inert). */
const char *tl_cupti_load(char *path, size_t pathlen, int *major_out)
{
	static char reason[6000];
	struct find_ctx c = { .major = 0 };
	const char *env = getenv("TIMELINE_CUPTI_PATH");
	void *h = NULL;

	dl_iterate_phdr(phdr_cb, &c);
	*major_out = c.major;
	if (env && *env) {
		h = try_open(env, path, pathlen);
		if (!h) {
			snprintf(reason, sizeof(reason), "TIMELINE_CUPTI_PATH %s: %s", env, dlerror());
			return reason;
		}
	} else if (c.major) {
		h = find_and_open(c.major, c.cudart_dir, path, pathlen);
	} else {
		h = find_and_open(13, NULL, path, pathlen);
		if (!h)
			h = find_and_open(12, NULL, path, pathlen);
	}
	if (!h) {
		if (c.major)
			snprintf(reason, sizeof(reason),
				 "no libcupti.so.%d found for the CUDA %d runtime in %s (install nvidia-cuda-cupti%s)",
				 c.major, c.major, c.cudart_dir, c.major == 12 ? "-cu12" : "");
		else
			snprintf(reason, sizeof(reason), "no libcupti found (no libcudart loaded; tried CUDA 13 and 12)");
		return reason;
	}
#define TL_SYM(name)                                                                     \
	tl_cupti.name = (__typeof__(name) *)dlsym(h, #name);                              \
	if (!tl_cupti.name) {                                                            \
		snprintf(reason, sizeof(reason), "%s lacks %s", path, #name);             \
		return reason;                                                          \
	}
	TL_CUPTI_REQUIRED(TL_SYM)
#undef TL_SYM
#define TL_OPT(name) tl_cupti.name = (__typeof__(name) *)dlsym(h, #name);
	TL_CUPTI_OPTIONAL(TL_OPT)
#undef TL_OPT
	if (tl_cupti.cuptiGetVersion(&tl_cupti.version) != CUPTI_SUCCESS) {
		snprintf(reason, sizeof(reason), "cuptiGetVersion failed in %s", path);
		return reason;
	}
	for (size_t i = 0; i < sizeof(layouts) / sizeof(*layouts); i++)
		if (tl_cupti.version >= layouts[i].lo && tl_cupti.version <= layouts[i].hi &&
		    (layouts[i].layout == 12 || TL_HAVE_V13))
			tl_cupti.layout = layouts[i].layout;
	if (!tl_cupti.layout) {
		snprintf(reason, sizeof(reason),
			 "CUPTI API version %u (%s) has record layouts this build does not decode "
			 "(built for 26-28 = CUDA 12.8-12.9%s)", tl_cupti.version, path,
			 TL_HAVE_V13 ? " and 130000-130001 = CUDA 13.0" : "");
		return reason;
	}
	return NULL;
}
