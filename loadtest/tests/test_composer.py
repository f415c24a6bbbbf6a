"""The two Composer packages of the repository (docs/install.md): the extension package at
the root (type php-ext, what PIE installs; phpize runs at the root) and the PHP library in
php/. The extension's composer.json is held to PIE's documented schema
(tests/install/php-ext-composer.schema.json, restated from PIE; PIE_PHP_EXT_SCHEMA=path
also checks against PIE's own schema file) and to what the build really produces."""

import copy
import json
import os
import re
import unittest

import jsonschema

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def load(*path):
    return json.loads(read(*path))


class ExtensionPackageTest(unittest.TestCase):
    def setUp(self):
        self.ext = load("composer.json")
        self.schema = load("tests", "install", "php-ext-composer.schema.json")
        jsonschema.Draft202012Validator.check_schema(self.schema)
        self.validator = jsonschema.Draft202012Validator(self.schema)

    def errors(self, doc):
        return [e.message for e in self.validator.iter_errors(doc)]

    def test_the_extension_package_meets_pies_schema(self):
        self.assertEqual(self.errors(self.ext), [])
        self.assertEqual(self.ext["type"], "php-ext")

    def test_against_pies_own_schema_file_when_given(self):
        path = os.environ.get("PIE_PHP_EXT_SCHEMA")
        if not path:
            self.skipTest("PIE_PHP_EXT_SCHEMA not set (PIE's resources/composer-json-php-ext-schema.json)")
        with open(path, encoding="utf-8") as f:
            pie = json.load(f)
        jsonschema.Draft202012Validator.check_schema(pie)
        errors = [e.message for e in jsonschema.Draft202012Validator(pie).iter_errors(self.ext)]
        self.assertEqual(errors, [])

    def test_the_schema_refuses_what_pie_refuses(self):
        cases = {
            "priority below 10": ("priority", 5),
            "priority above 99": ("priority", 100),
            "a hyphen in the extension name": ("extension-name", "checkout-guard"),
            "a misspelt key": ("support_zts", True),
            "an unknown OS family": ("os-families-exclude", ["win32"]),
            "a configure flag with its dashes": ("configure-options", [{"name": "--with-cargo"}]),
            "a build path that is a number": ("build-path", 1),
            "an unknown download method": ("download-url-method", ["pre-packaged-binaries"]),
            "an empty list of download methods": ("download-url-method", []),
        }
        for what, (key, value) in cases.items():
            doc = copy.deepcopy(self.ext)
            doc["php-ext"][key] = value
            self.assertNotEqual(self.errors(doc), [], what)
        both = copy.deepcopy(self.ext)
        both["php-ext"]["os-families"] = ["linux"]
        self.assertNotEqual(self.errors(both), [], "os-families with os-families-exclude")
        library_type = dict(self.ext, type="library")
        self.assertNotEqual(self.errors(library_type), [], "type library")

    def test_pie_tries_the_prebuilt_binary_first_then_builds(self):
        # scripts/release.sh uploads the binaries; without one for a platform PIE builds.
        self.assertEqual(self.ext["php-ext"]["download-url-method"], ["pre-packaged-binary", "composer-default"])

    def test_the_extension_name_is_the_module_the_build_makes(self):
        name = self.ext["php-ext"]["extension-name"]
        # ext-php-rs names the module after the crate; config.m4's switch is the name with -.
        cargo_name = re.search(r'^\[package\]\s*\nname\s*=\s*"([^"]+)"', read("Cargo.toml"), re.M).group(1)
        self.assertEqual(cargo_name, name)
        m4 = read("config.m4")
        self.assertIn("PHP_ARG_ENABLE([%s]" % name.replace("_", "-"), m4)
        self.assertIn("$(phplibdir)/%s.so" % name, read("Makefile.frag"))

    def test_phpize_runs_at_the_package_root(self):
        build_path = self.ext["php-ext"].get("build-path") or "."
        self.assertTrue(os.path.isfile(os.path.join(ROOT, build_path, "config.m4")))
        self.assertFalse(os.path.exists(os.path.join(ROOT, build_path, "Makefile")),
                         "a Makefile next to config.m4 is overwritten by ./configure, and "
                         "docker-php-ext-install skips ./configure when it finds one")

    def test_the_php_range_is_what_configure_and_ext_php_rs_accept(self):
        php = self.ext["require"]["php"]
        self.assertEqual(php, ">=8.2 <8.7")  # ext-php-rs 0.16 builds 8.1 to 8.6; src/convert.rs reads 8.2+'s arPacked
        self.assertIn("-lt 80200", read("config.m4"))

    def test_the_ini_priority_is_the_debian_packages(self):
        deb = read("scripts", "deb.sh")
        m = re.search(r"^priority=(\d+)", deb, re.M)
        self.assertIsNotNone(m, "scripts/deb.sh sets priority=NN")
        self.assertEqual(int(m.group(1)), self.ext["php-ext"]["priority"])


class LibraryPackageTest(unittest.TestCase):
    def test_the_library_lives_in_php_and_needs_the_extension(self):
        lib = load("php", "composer.json")
        ext = load("composer.json")
        self.assertEqual(lib["type"], "library")
        self.assertNotEqual(lib["name"], ext["name"], "PIE: an extension package must not share a library's name")
        self.assertIn("ext-" + ext["php-ext"]["extension-name"], lib["require"])
        for prefix, path in lib["autoload"]["psr-4"].items():
            self.assertTrue(os.path.isdir(os.path.join(ROOT, "php", path)), path)
            self.assertEqual(prefix, "CheckoutGuard\\")


if __name__ == "__main__":
    unittest.main()
