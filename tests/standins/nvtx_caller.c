/*
 * STAND-IN NVTX user, tests only: calls NVTX v3 the way frameworks do.
 * NVTX v3 is header-only: the loader compiled in here from NVIDIA's own
 * nvtx3 headers reads NVTX_INJECTION64_PATH and calls the injection's
 * InitializeInjectionNvtx2 on the first NVTX call, as in a real program.
 */
#include <wchar.h>
#include <nvtx3/nvToolsExt.h>

/* push/pop nested `levels` deep: level0 > level1 > ... */
void nvtx_nested(int levels)
{
	static const char *names[] = { "level0", "level1", "level2", "level3", "level4", "level5" };
	for (int i = 0; i < levels && i < 6; i++)
		nvtxRangePushA(names[i]);
	for (int i = 0; i < levels && i < 6; i++)
		nvtxRangePop();
}

void nvtx_push(const char *m) { nvtxRangePushA(m); }
void nvtx_pop(void) { nvtxRangePop(); }

unsigned long long nvtx_start(const char *m) { return nvtxRangeStartA(m); }
void nvtx_end(unsigned long long id) { nvtxRangeEnd(id); }

void nvtx_wide(void)
{
	nvtxRangePushW(L"wide_\u00b5s");
	nvtxRangePop();
}

/* a domain, an ASCII message and a registered string, as Megatron/NeMo do */
void nvtx_domain(void)
{
	nvtxDomainHandle_t d = nvtxDomainCreateA("standin.domain");
	nvtxStringHandle_t reg = nvtxDomainRegisterStringA(d, "registered_message");
	nvtxEventAttributes_t a = { 0 };

	a.version = NVTX_VERSION;
	a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
	a.messageType = NVTX_MESSAGE_TYPE_ASCII;
	a.message.ascii = "domain_outer";
	nvtxDomainRangePushEx(d, &a);
	a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
	a.message.registered = reg;
	nvtxDomainRangePushEx(d, &a);
	nvtxDomainRangePop(d);
	nvtxDomainRangePop(d);
}
