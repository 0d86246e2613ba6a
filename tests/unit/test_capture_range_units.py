"""--capture-range without a recording: the cut keeps bookkeeping records outside the
window. Recordings: tests/system/test_capture_range.py.
"""
from timeline import events
from timeline.cuda import records as cuda_records


def test_bookkeeping_records_are_kept_outside_the_window():
    """Kernel registrations (at library load) name the kernels launched inside
    a later window: the window keeps them, and drops the calls around them."""
    import numpy as np

    from timeline.capture import NEVER, CaptureWindow
    from timeline.cuda.family import CudaOptions
    from timeline.cuda.plugin import CudaPlugin
    from timeline.cuda.probes import BY_NAME

    recs = np.zeros(4, cuda_records.CUDA_EVENT)
    recs["ts"] = [100, 200, 300, 400]
    recs["kind"] = cuda_records.CUDA_CALL
    recs["cookie"] = [BY_NAME["__cudaRegisterFunction"].cookie(), BY_NAME["cudaLaunchKernel"].cookie(),
                      BY_NAME["cudaProfilerStart"].cookie(), BY_NAME["cudaLaunchKernel"].cookie()]
    data = events.encode_ring_bytes(recs)
    stride = events.ring_stride(cuda_records.CUDA_EVENT)
    plugin = CudaPlugin(None, CudaOptions(capture_range="cudaProfilerApi"))
    from timeline.capture import as_rows
    marks = plugin.capture_marks(cuda_records.RING_CUDA, as_rows(data, stride))
    assert marks == [(300, True)]
    window = CaptureWindow(NEVER)
    for ts, on in marks:
        window.set_on(ts) if on else window.set_off(ts)
    kept = events.decode_ring_bytes(window.keep(cuda_records.RING_CUDA, data, stride, plugin.always_keep),
                                    cuda_records.CUDA_EVENT)
    assert kept["ts"].tolist() == [100, 300, 400]  # the registration, then the range
