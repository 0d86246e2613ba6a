# Two commands do all set-up:
#   sudo make demo   record the bundled training example into demo.pftrace
#   sudo make test   run the test suite (real eBPF, needs root)
PYTHON ?= python3
export PYTHON

.PHONY: setup build demo test clean

setup:
	bash scripts/setup.sh

build:
	$(PYTHON) -m timeline.bpf.build

demo: setup
	timeline record -o demo.pftrace -- $(PYTHON) examples/train_cpu.py
	$(PYTHON) examples/show_trace.py demo.pftrace
	timeline check demo.pftrace

test: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider tests

clean:
	rm -f timeline/bpf/*.bpf.o timeline/bpf/vmlinux.h demo.pftrace
