# checkout_guard's part of the Makefile that phpize's ./configure writes (see config.m4).
#
#   make          cargo build --release -p checkout_guard against the configured PHP, then
#                 modules/checkout_guard.so (cargo decides what to rebuild)
#   make install  installs modules/checkout_guard.so into php-config --extension-dir; it
#                 builds only when modules/checkout_guard.so is missing, so `sudo make
#                 install` after `make` never runs cargo as root
#   make clean    removes modules/ and target/phpize/ (cargo's output unless
#                 CHECKOUT_GUARD_TARGET_DIR names another), nothing else (see below)

CHECKOUT_GUARD_SO = $(phplibdir)/checkout_guard.so
CHECKOUT_GUARD_LIB = $(CHECKOUT_GUARD_TARGET_DIR)/release/libcheckout_guard.so

all: checkout-guard-cargo
install-modules: $(CHECKOUT_GUARD_SO)

# MAKEFLAGS is dropped: cargo runs its own jobs and make hands it no jobserver.
# CFLAGS (configure's, which make exports to cargo) reach the one C file of the build,
# ext-php-rs's wrapper.c (the cc crate reads them), linked into a shared object: -fPIC
# goes last, as libtool does for PHP's own extensions. The official php images configure
# with CFLAGS="... -fpic -fpie ...", and -fpie alone fails the link (R_X86_64_PC32 against
# executor_globals).
checkout-guard-cargo $(CHECKOUT_GUARD_SO):
	@echo "cargo build --release -p checkout_guard (PHP: $(CHECKOUT_GUARD_PHP))"
	cd "$(CHECKOUT_GUARD_SRCDIR)" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
		CFLAGS="$(CFLAGS) -fPIC" \
		PHP="$(CHECKOUT_GUARD_PHP)" PHP_CONFIG="$(CHECKOUT_GUARD_PHP_CONFIG)" \
		CARGO_TARGET_DIR="$(CHECKOUT_GUARD_TARGET_DIR)" \
		"$(CARGO)" build --release --locked -p checkout_guard
	@test -d "$(phplibdir)" || mkdir -p "$(phplibdir)"
	cp "$(CHECKOUT_GUARD_LIB)" "$(CHECKOUT_GUARD_TARGET_DIR)/checkout_guard.so.tmp"
	mv -f "$(CHECKOUT_GUARD_TARGET_DIR)/checkout_guard.so.tmp" "$(CHECKOUT_GUARD_SO)"

# The stock `clean` runs `find . -name '*.so' | xargs rm -f` (and *.a, *.o) over the
# whole tree: in a checkout that deletes .venv's Python modules and, in cargo's target
# directories, build-script libraries that cargo does not know are gone (the next build
# fails to link). This recipe replaces it (make warns that it overrides the recipe).
clean:
	rm -rf "$(phplibdir)"/* .libs "$(top_builddir)/target/phpize"
	rm -f *.lo *.la

.PHONY: checkout-guard-cargo
