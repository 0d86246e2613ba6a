# Two commands do all set-up:
#   sudo make demo   record the bundled training example into demo.pftrace
#   sudo make test   run the test suite (real eBPF, needs root)
# Both run scripts/setup.sh first, which installs timeline into the project's
# virtual environment .venv (made with $(PYTHON), default python3 on PATH).
# After that, `make test-fast` runs the unit half of the suite (tests/unit)
# in seconds, without root.
PYTHON ?= python3
VENV ?= .venv
export PYTHON VENV
VPY := $(VENV)/bin/python
TIMELINE := $(VENV)/bin/timeline

.PHONY: setup build demo test test-fast doctor clean

setup:
	bash scripts/setup.sh

build:
	$(VPY) -m timeline.bpf.build

demo: setup
	$(TIMELINE) doctor
	$(TIMELINE) record -o demo.pftrace -- $(VPY) examples/train_cpu.py
	$(VPY) examples/show_trace.py demo.pftrace
	$(TIMELINE) check demo.pftrace

test: setup
	$(VPY) -m pytest -q -p no:cacheprovider tests

# No setup here: setup needs root (apt), this must not.
test-fast:
	@test -x $(VPY) || { echo "make: no $(VPY) yet: run 'sudo make setup' once" >&2; exit 1; }
	$(VPY) -m pytest -q -p no:cacheprovider tests/unit

clean:
	rm -rf timeline/bpf/*.bpf.o timeline/bpf/vmlinux.h demo.pftrace build *.egg-info

doctor: setup
	$(TIMELINE) doctor
