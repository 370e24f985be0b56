# elastic: the front door. Everything real happens in CMake (CMakeLists.txt).
#
#   make               build (MODE=release by default) into build/<mode>
#   make test          build, then run every test tier that runs on CPU (ctest)
#   make deps          install the Debian packages the project needs (idempotent; munge and
#                      Slurm's daemons are left disabled: only the Slurm tests use them)
#   make demo          3 daemons as hosts in network namespaces train Fashion-MNIST through a kill -9
#   make install       binaries, systemd unit + tmpfiles, Slurm scripts, the Python progress
#                      module (share/elastic/python), /etc/elastic/elasticd.toml
#                      (kept if present) (PREFIX=/usr/local, DESTDIR honoured; systemd/README.md)
#   make format        clang-format every source file
#
# MODE=debug|release|asan|tsan picks the build type and sanitizer.

MODE ?= release
PREFIX ?= /usr/local
DESTDIR ?=
JOBS ?= $(shell nproc)
BUILD_DIR ?= build/$(MODE)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

# Every package the project needs on Debian 12, build and test alike.
DEB_PACKAGES := build-essential cmake pkg-config git ca-certificates iproute2 procps \
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libhwloc-dev libtoml11-dev \
  libgtest-dev libgmock-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev \
  zlib1g-dev libsystemd-dev clang libclang-rt-14-dev \
  libtorch-dev libgloo-dev libopenblas0-pthread dataset-fashion-mnist python3 python3-venv \
  python3-torch \
  systemd systemd-container slurmctld slurmd slurm-client munge chromium

ifeq ($(MODE),release)
  BUILD_TYPE := Release
else ifeq ($(MODE),debug)
  BUILD_TYPE := Debug
else ifeq ($(MODE),asan)
  BUILD_TYPE := RelWithDebInfo
  SANITIZE := address,undefined
else ifeq ($(MODE),tsan)
  BUILD_TYPE := RelWithDebInfo
  SANITIZE := thread
else
  $(error MODE must be one of debug, release, asan, tsan (got '$(MODE)'))
endif

.PHONY: all build test deps deps-check demo install format clean

all: build

# Installs only when a package is missing, so `make` stays quick on a ready machine.
deps-check:
	@missing=$$(dpkg-query -W -f='$${db:Status-Abbrev} $${Package}\n' $(DEB_PACKAGES) 2>/dev/null \
	    | awk '$$1 == "ii" {print $$2}' | sort > .deps-have.tmp; \
	    for p in $(DEB_PACKAGES); do grep -qx "$$p" .deps-have.tmp || echo $$p; done; rm -f .deps-have.tmp); \
	if [ -n "$$missing" ]; then echo "make: missing packages:" $$missing; $(MAKE) --no-print-directory deps; fi

# Units only the test tiers use: the Slurm tier starts private copies of munge, slurmctld and
# slurmd itself (its own key, sockets, ports and config: tests/slurm/cluster-up.sh), and
# systemd-container's machines.target is for the systemd tier's nspawn. Debian enables and starts a
# service when its package is installed, so deps turns off again each one that the install
# enabled or started; one the machine had enabled or running before is left as it was.
TEST_ONLY_SERVICES := munge slurmctld slurmd machines.target

deps:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  booted=; [ -d /run/systemd/system ] && booted=1; \
	  enabled_before=; active_before=; \
	  for s in $(TEST_ONLY_SERVICES); do \
	    systemctl is-enabled --quiet $$s 2>/dev/null && enabled_before="$$enabled_before $$s"; \
	    [ -n "$$booted" ] && systemctl is-active --quiet $$s 2>/dev/null && active_before="$$active_before $$s"; \
	  done; \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $(DEB_PACKAGES) || exit 1; \
	  for s in $(TEST_ONLY_SERVICES); do \
	    case " $$enabled_before " in *" $$s "*) ;; *) \
	      if systemctl is-enabled --quiet $$s 2>/dev/null; then \
	        echo "make deps: disabling $$s again (only a test tier uses it, and it starts its own)"; \
	        $$SUDO systemctl disable --quiet $$s || exit 1; \
	      fi;; \
	    esac; \
	    case " $$active_before " in *" $$s "*) ;; *) \
	      if [ -n "$$booted" ] && systemctl is-active --quiet $$s 2>/dev/null; then \
	        echo "make deps: stopping $$s again (the install started it)"; \
	        $$SUDO systemctl stop $$s || exit 1; \
	      fi;; \
	    esac; \
	  done

$(BUILD_DIR)/CMakeCache.txt: CMakeLists.txt
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DELASTIC_SANITIZE=$(SANITIZE) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: deps-check $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

demo: build
	ELASTIC_BUILD_DIR=$(BUILD_DIR) examples/demo-cluster.sh

# Re-configures with PREFIX so that paths derived from it (the config under /etc for /usr) follow.
install: build
	cmake -S . -B $(BUILD_DIR) -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	DESTDIR=$(DESTDIR) cmake --install $(BUILD_DIR)
	@if [ -z "$(DESTDIR)" ]; then echo "next: systemctl daemon-reload && systemctl enable --now elasticd" \
	  "(edit /etc/elastic/elasticd.toml first: membership.seeds, consensus.voters)"; fi

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf build
