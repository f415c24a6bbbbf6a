dnl checkout_guard, the PHP way: phpize && ./configure && make && make install.
dnl
dnl The extension is Rust (ext-php-rs), so there is no C to compile here: configure finds
dnl cargo and the PHP that phpize was run for, and Makefile.frag has `make` run
dnl `cargo build --release -p checkout_guard` against that PHP (ext-php-rs reads the
dnl PHP and PHP_CONFIG environment variables) and copy the library to
dnl modules/checkout_guard.so, where `make install`, PIE and docker-php-ext-install
dnl expect it. Needs Rust >= 1.89 (cargo), clang/libclang (bindgen) and the PHP CLI.
dnl docs/install.md has the three install paths.

PHP_ARG_ENABLE([checkout-guard],
  [whether to enable checkout_guard],
  [AS_HELP_STRING([--enable-checkout-guard],
    [Enable checkout_guard, the Valkey-backed checkout rate limiter (built with cargo)])])

PHP_ARG_WITH([cargo],
  [],
  [AS_HELP_STRING([[--with-cargo[=PATH]]],
    [Path to cargo (default: cargo on PATH, then ~/.cargo/bin/cargo)])],
  [yes],
  [no])

if test "$PHP_CHECKOUT_GUARD" != "no"; then
  dnl The PHP to build against: phpize's php-config (--with-php-config) and the php
  dnl binary it names. ext-php-rs reads `php -i` (version, ZTS, debug) and
  dnl `php-config --includes`; both must be absolute paths for its build script.
  AC_MSG_CHECKING([for php-config of the target PHP])
  CHECKOUT_GUARD_PHP_CONFIG=`command -v "$PHP_CONFIG" 2>/dev/null`
  case "$CHECKOUT_GUARD_PHP_CONFIG" in
    /*) ;;
    *) AC_MSG_ERROR([cannot resolve php-config '$PHP_CONFIG' to an absolute path]) ;;
  esac
  AC_MSG_RESULT([$CHECKOUT_GUARD_PHP_CONFIG])

  dnl The php binary: $PHP when set (ext-php-rs's own variable), else what php-config
  dnl --php-binary names (Debian's php-config asks dpkg and says NONE when phpX.Y-cli is
  dnl not installed as a package), else the php next to php-config with its suffix
  dnl (php-config8.4 -> php8.4), then plain php there.
  AC_MSG_CHECKING([for the target PHP binary])
  checkout_guard_real_config=`readlink -f "$CHECKOUT_GUARD_PHP_CONFIG" 2>/dev/null || echo "$CHECKOUT_GUARD_PHP_CONFIG"`
  checkout_guard_bindir=`dirname "$checkout_guard_real_config"`
  checkout_guard_suffix=`basename "$checkout_guard_real_config" | $SED -e 's/^php-config//'`
  CHECKOUT_GUARD_PHP=
  for checkout_guard_php in "$PHP" "$PHP_EXECUTABLE" "$checkout_guard_bindir/php$checkout_guard_suffix" "$checkout_guard_bindir/php"; do
    if test -n "$checkout_guard_php" && test -f "$checkout_guard_php" && test -x "$checkout_guard_php"; then
      CHECKOUT_GUARD_PHP=$checkout_guard_php
      break
    fi
  done
  if test -z "$CHECKOUT_GUARD_PHP"; then
    AC_MSG_ERROR([no php binary found for $CHECKOUT_GUARD_PHP_CONFIG (php-config --php-binary says '$PHP_EXECUTABLE'): the PHP CLI is needed to build checkout_guard; name it with PHP=/path/to/php ./configure])
  fi
  AC_MSG_RESULT([$CHECKOUT_GUARD_PHP])

  dnl php and php-config must be the same PHP: ext-php-rs reads the version from php -i
  dnl and the headers from php-config.
  AC_MSG_CHECKING([whether $CHECKOUT_GUARD_PHP is the PHP of php-config])
  checkout_guard_php_minor=`"$CHECKOUT_GUARD_PHP" -n -r 'echo PHP_MAJOR_VERSION * 100 + PHP_MINOR_VERSION;' 2>/dev/null`
  checkout_guard_config_minor=`"$CHECKOUT_GUARD_PHP_CONFIG" --vernum 2>/dev/null | $SED -e 's/..$//'`
  if test -z "$checkout_guard_php_minor" || test "$checkout_guard_php_minor" != "$checkout_guard_config_minor"; then
    AC_MSG_ERROR([$CHECKOUT_GUARD_PHP is PHP ${checkout_guard_php_minor:-?} (major*100+minor), php-config is ${checkout_guard_config_minor:-?}: name the right one with PHP=/path/to/php ./configure])
  fi
  AC_MSG_RESULT([yes])

  AC_MSG_CHECKING([for PHP 8.2 or newer])
  checkout_guard_vernum=`"$CHECKOUT_GUARD_PHP_CONFIG" --vernum 2>/dev/null`
  if test -z "$checkout_guard_vernum" || test "$checkout_guard_vernum" -lt 80200; then
    AC_MSG_ERROR([checkout_guard needs PHP 8.2 or newer (it reads the packed arrays of PHP 8.2); php-config says ${checkout_guard_vernum:-nothing}])
  fi
  AC_MSG_RESULT([yes, $checkout_guard_vernum])

  dnl cargo: --with-cargo=PATH, else $CARGO, else PATH, else rustup's default place.
  if test "$PHP_CARGO" != "yes" && test "$PHP_CARGO" != "no"; then
    CARGO=$PHP_CARGO
  fi
  AC_PATH_PROG([CARGO], [cargo], [], [$PATH:$HOME/.cargo/bin])
  if test -z "$CARGO" || test ! -x "$CARGO"; then
    AC_MSG_ERROR([cargo not found: install Rust (https://rustup.rs, 1.89 or newer) or pass --with-cargo=PATH])
  fi

  dnl Where cargo builds: target/phpize under the build directory, apart from a
  dnl developer's target/release (another PHP may be the target here). `make clean`
  dnl removes it. `make CHECKOUT_GUARD_TARGET_DIR=DIR` builds in DIR (which clean keeps).
  CHECKOUT_GUARD_SRCDIR=$abs_srcdir
  CHECKOUT_GUARD_TARGET_DIR=$abs_builddir/target/phpize

  PHP_SUBST([CARGO])
  PHP_SUBST([CHECKOUT_GUARD_PHP])
  PHP_SUBST([CHECKOUT_GUARD_PHP_CONFIG])
  PHP_SUBST([CHECKOUT_GUARD_SRCDIR])
  PHP_SUBST([CHECKOUT_GUARD_TARGET_DIR])
  PHP_ADD_MAKEFILE_FRAGMENT([$abs_srcdir/Makefile.frag], [$abs_srcdir], [$abs_builddir])
fi
