<?php
// Writes the IDE stubs of the checkout_guard extension to stdout, from the loaded
// extension's Reflection: every class and interface it declares, with `final`, its parent
// and interfaces, its constants and properties, and every method's signature (visibility,
// static, parameter and return types, defaults) as Reflection reports them. Run by
// scripts/stubs.sh (which loads the extension):
//   php -d extension=target/release/libcheckout_guard.so scripts/stubs.php [SRC_DIR [DOCS...]]
// The docblocks: the Rust doc comments (`///`) of the #[php_class] structs and the
// #[php_impl]/#[php_interface] methods under SRC_DIR (default src/; an interface method
// without its own takes the implementing class's), and the table below for what Reflection
// and the Rust source cannot say (the exceptions, registered by hand; the documented values
// of a string, checked against the docs' tables DOCS, default README.md docs/*.md).
// A constructor Reflection shows but PHP refuses to run (ext-php-rs gives a class without
// one a constructor that throws "You cannot instantiate this class from PHP") is written
// private. Exits 1 naming what it cannot write.
declare(strict_types=1);

const EXT = 'checkout_guard';

// Docblocks Reflection and the Rust source cannot give. 'doc' replaces a missing
// docblock; 'values' are the documented values of a string return, written as its
// @return type and checked against the row of a docs table that starts with `| `KEY`.
const TABLE = [
    'CheckoutGuard\ConfigurationException' => [
        'doc' => "Bad options or arguments; the message names the option (or argument) and the value.",
    ],
    'CheckoutGuard\UnavailableException' => [
        'doc' => "Valkey could not be reached and on_unavailable is \"throw\", or an administrative call\n"
            . "(markHot, unmarkHot, isHot, reset) could not reach Valkey. Never carries a password.",
    ],
    'CheckoutGuard\Decision::reason' => [
        'values' => ['allowed', 'provider', 'global', 'endpoint', 'hot_lane', 'hot_shop', 'in_flight_global',
            'in_flight_hot_lane', 'in_flight_hot_shop', 'unavailable'],
        'row' => 'reason()',
    ],
];

function fail(string $message): never
{
    fwrite(STDERR, "scripts/stubs.php: $message\n");
    exit(1);
}

/** Rust `snake_case` to the camelCase ext-php-rs gives PHP methods (`__construct` kept). */
function php_method_name(string $rust): string
{
    if (str_starts_with($rust, '__')) {
        return $rust;
    }
    $parts = explode('_', $rust);
    return $parts[0] . implode('', array_map('ucfirst', array_slice($parts, 1)));
}

/**
 * Doc comments of the Rust source: ['classes' => [PHP class => doc], 'methods' =>
 * [lowercase PHP class => [lowercase method => doc]]]. The files are rustfmt'ed: items at
 * column 0, methods of an impl or trait indented by 4.
 * @return array{classes: array<string, string>, methods: array<string, array<string, string>>}
 */
function rust_docs(string $dir): array
{
    $files = glob(rtrim($dir, '/') . '/*.rs') ?: [];
    if ($files === []) {
        fail("no Rust sources in $dir");
    }
    $classes = [];   // Rust type => [php name, doc]
    $methods = [];   // Rust type => [php method => doc]
    foreach ($files as $file) {
        $doc = [];
        $attrs = [];
        $block = null;   // the Rust type of the #[php_impl] / #[php_interface] block we are in
        $blockName = null;
        $inAttr = false;
        foreach (file($file, FILE_IGNORE_NEW_LINES) as $line) {
            if ($inAttr) {
                $attrs[count($attrs) - 1] .= ' ' . trim($line);
                $inAttr = !str_ends_with(rtrim($line), ']');
                continue;
            }
            if (preg_match('~^\s*///\s?(.*)$~', $line, $m)) {
                $doc[] = rtrim($m[1]);
                continue;
            }
            if (preg_match('~^\s*//(?![/!])~', $line)) {
                continue;   // a plain comment between a doc comment and its item
            }
            if (preg_match('~^\s*#\[~', $line)) {
                $attrs[] = trim($line);
                $inAttr = !str_ends_with(rtrim($line), ']');
                continue;
            }
            $name = null;
            foreach ($attrs as $a) {
                if (preg_match('~^#\[php\(name\s*=\s*"((?:[^"\\\\]|\\\\.)*)"~', $a, $m)) {
                    $name = stripcslashes($m[1]);
                }
            }
            $isPhp = static fn(string $what): bool => (bool) array_filter($attrs, static fn($a) => str_starts_with($a, "#[$what"));
            if (preg_match('~^pub struct (\w+)~', $line, $m) && $isPhp('php_class')) {
                $classes[$m[1]] = [$name ?? $m[1], implode("\n", $doc)];
            } elseif (preg_match('~^impl (\w+)\s*\{~', $line, $m) && $isPhp('php_impl')) {
                $block = $m[1];
            } elseif (preg_match('~^pub trait (\w+)~', $line, $m) && $isPhp('php_interface')) {
                $block = $m[1];
                $blockName = $name;
                $classes[$m[1]] = [$name ?? $m[1], implode("\n", $doc)];
            } elseif ($block !== null && preg_match('~^    (?:pub )?fn (\w+)~', $line, $m)) {
                $methods[$block][strtolower($name ?? php_method_name($m[1]))] = implode("\n", $doc);
            } elseif (preg_match('~^\}~', $line)) {
                $block = null;
                $blockName = null;
            }
            if (trim($line) !== '') {
                $doc = [];
                $attrs = [];
            }
        }
    }
    $out = ['classes' => [], 'methods' => []];
    foreach ($classes as $rust => [$php, $doc]) {
        $out['classes'][$php] = $doc;
        $out['methods'][strtolower($php)] = $methods[$rust] ?? [];
    }
    return $out;
}

/** The row of a docs table that starts with `| `KEY`: the double-quoted values in it. */
function documented_values(string $key, array $docFiles): ?array
{
    foreach ($docFiles as $f) {
        foreach (file($f, FILE_IGNORE_NEW_LINES) ?: [] as $line) {
            if (str_starts_with($line, '| `' . $key)) {
                preg_match_all('~"([a-z_]+)"~', $line, $m);
                return array_values(array_unique($m[1]));
            }
        }
    }
    return null;
}

function type_str(?ReflectionType $t): string
{
    if ($t === null) {
        return '';
    }
    if ($t instanceof ReflectionUnionType) {
        return implode('|', array_map('type_str', $t->getTypes()));
    }
    if ($t instanceof ReflectionIntersectionType) {
        return implode('&', array_map('type_str', $t->getTypes()));
    }
    /** @var ReflectionNamedType $t */
    $name = $t->isBuiltin() || in_array($t->getName(), ['self', 'static', 'parent'], true) ? $t->getName() : '\\' . $t->getName();
    return $t->allowsNull() && !in_array($name, ['mixed', 'null'], true) ? "?$name" : $name;
}

function value_str(mixed $v): string
{
    return match (true) {
        $v === null => 'null',
        is_bool($v) => $v ? 'true' : 'false',
        is_float($v) && is_infinite($v) => $v > 0 ? 'INF' : '-INF',
        is_float($v) => var_export($v, true),
        is_array($v) && $v === [] => '[]',
        is_array($v) => '[' . implode(', ', array_map(
            static fn($k, $x) => (array_is_list($v) ? '' : value_str($k) . ' => ') . value_str($x),
            array_keys($v),
            $v,
        )) . ']',
        default => var_export($v, true),
    };
}

function param_str(ReflectionParameter $p, string $where): string
{
    $s = type_str($p->getType());
    $s .= ($s === '' ? '' : ' ') . ($p->isPassedByReference() ? '&' : '') . ($p->isVariadic() ? '...' : '') . '$' . $p->getName();
    if ($p->isOptional() && !$p->isVariadic()) {
        if (!$p->isDefaultValueAvailable()) {
            fail("$where: \${$p->getName()} is optional but Reflection gives no default");
        }
        $s .= ' = ' . ($p->isDefaultValueConstant() ? '\\' . ltrim((string) $p->getDefaultValueConstantName(), '\\') : value_str($p->getDefaultValue()));
    }
    return $s;
}

function docblock(string $text, array $tags, string $indent): string
{
    $lines = $text === '' ? [] : explode("\n", $text);
    if ($tags !== []) {
        if ($lines !== []) {
            $lines[] = '';
        }
        array_push($lines, ...$tags);
    }
    if ($lines === []) {
        return '';
    }
    $out = "$indent/**\n";
    foreach ($lines as $l) {
        $out .= rtrim("$indent * $l") . "\n";
    }
    return $out . "$indent */\n";
}

/** Whether PHP refuses to run this constructor (ext-php-rs's stand-in for none). */
function refused_constructor(ReflectionClass $c, ReflectionMethod $m): bool
{
    if ($m->getNumberOfParameters() !== 0 || $c->isAbstract() || $c->isInterface()) {
        return false;
    }
    try {
        $c->newInstance();
        return false;
    } catch (Throwable $e) {
        return str_contains($e->getMessage(), 'cannot instantiate');
    }
}

$src = $argv[1] ?? 'src';
$docFiles = array_slice($argv, 2) ?: array_merge(['README.md'], glob('docs/*.md') ?: []);
if (!extension_loaded(EXT)) {
    fail('the extension is not loaded: php -d extension=PATH/libcheckout_guard.so ' . $argv[0]);
}
$docs = rust_docs($src);

foreach (TABLE as $key => $entry) {
    if (!isset($entry['values'])) {
        continue;
    }
    $documented = documented_values($entry['row'], $docFiles);
    if ($documented === null) {
        fail("no docs table row starting with | `{$entry['row']} in " . implode(' ', $docFiles));
    }
    $missing = array_diff($documented, $entry['values']);
    $extra = array_diff($entry['values'], $documented);
    if ($missing || $extra) {
        fail("$key: the docs list " . json_encode(array_values($documented)) . ', the table in scripts/stubs.php '
            . json_encode($entry['values']) . ' (missing here: ' . json_encode(array_values($missing))
            . ', not in the docs: ' . json_encode(array_values($extra)) . ')');
    }
}

$classes = array_map(static fn($n) => new ReflectionClass($n), (new ReflectionExtension(EXT))->getClassNames());
if ($classes === []) {
    fail('the extension declares no classes');
}
// Interfaces first, then the others: each declared before the classes that name it, so the
// file also loads without the extension.
usort($classes, static fn(ReflectionClass $a, ReflectionClass $b) => [!$a->isInterface(), $a->getName()] <=> [!$b->isInterface(), $b->getName()]);

$byNamespace = [];
foreach ($classes as $c) {
    $byNamespace[$c->getNamespaceName()][] = $c;
}

$out = "<?php\n\n// Stubs for the checkout_guard extension, for IDEs and static analysis: never load them\n"
    . "// where the extension is loaded. Generated by scripts/stubs.sh from the extension's\n"
    . "// Reflection and the Rust doc comments (scripts/stubs.php); do not edit.\n";
foreach ($byNamespace as $ns => $list) {
    $out .= "\nnamespace $ns {\n";
    $first = true;
    foreach ($list as $c) {
        $name = $c->getName();
        $out .= $first ? '' : "\n";
        $first = false;
        $out .= docblock($docs['classes'][$name] ?? TABLE[$name]['doc'] ?? '', [], '    ');
        $parent = $c->getParentClass();
        $inherited = $parent ? $parent->getInterfaceNames() : [];
        $own = [];
        foreach ($c->getInterfaceNames() as $i) {
            // Only the interfaces not already implied by the parent or another listed one.
            $implied = in_array($i, $inherited, true);
            foreach ($c->getInterfaceNames() as $j) {
                $implied = $implied || ($j !== $i && in_array($i, (new ReflectionClass($j))->getInterfaceNames(), true));
            }
            if (!$implied) {
                $own[] = '\\' . $i;
            }
        }
        sort($own);
        if ($c->isInterface()) {
            $head = 'interface ' . $c->getShortName() . ($own ? ' extends ' . implode(', ', $own) : '');
        } else {
            $mods = ($c->isFinal() ? 'final ' : '') . ($c->isAbstract() ? 'abstract ' : '') . ($c->isReadOnly() ? 'readonly ' : '');
            $head = $mods . 'class ' . $c->getShortName()
                . ($parent ? ' extends \\' . $parent->getName() : '')
                . ($own ? ' implements ' . implode(', ', $own) : '');
        }
        $body = [];
        foreach ($c->getReflectionConstants() as $k) {
            if ($k->getDeclaringClass()->getName() !== $name) {
                continue;
            }
            $vis = $k->isPrivate() ? 'private' : ($k->isProtected() ? 'protected' : 'public');
            $body[] = docblock($k->getDocComment() ?: '', [], '        ')
                . "        " . ($k->isFinal() && !$c->isFinal() ? 'final ' : '') . "$vis const {$k->getName()} = " . value_str($k->getValue()) . ";\n";
        }
        foreach ($c->getProperties() as $p) {
            if ($p->getDeclaringClass()->getName() !== $name) {
                continue;
            }
            $vis = $p->isPrivate() ? 'private' : ($p->isProtected() ? 'protected' : 'public');
            $t = type_str($p->getType());
            $body[] = "        $vis " . ($p->isStatic() ? 'static ' : '') . ($p->isReadOnly() ? 'readonly ' : '') . ($t !== '' ? "$t " : '')
                . '$' . $p->getName() . ($p->hasDefaultValue() && !$p->isReadOnly() ? ' = ' . value_str($p->getDefaultValue()) : '') . ";\n";
        }
        $methods = array_filter($c->getMethods(), static fn($m) => $m->getDeclaringClass()->getName() === $name);
        // Reflection's order is the registration order; the stubs sort by name, constructor first.
        usort($methods, static fn($a, $b) => [$a->getName() !== '__construct', $a->getName()] <=> [$b->getName() !== '__construct', $b->getName()]);
        foreach ($methods as $m) {
            $where = "$name::{$m->getName()}()";
            $doc = $docs['methods'][strtolower($name)][strtolower($m->getName())] ?? '';
            if ($doc === '' && $c->isInterface()) {
                // An interface method documented where it is implemented.
                foreach ($classes as $impl) {
                    if (!$impl->isInterface() && $impl->implementsInterface($name)) {
                        $doc = $docs['methods'][strtolower($impl->getName())][strtolower($m->getName())] ?? '';
                        if ($doc !== '') {
                            break;
                        }
                    }
                }
            }
            $tags = [];
            $values = TABLE["$name::{$m->getName()}"]['values'] ?? null;
            foreach ($c->isInterface() ? $classes : [] as $impl) {
                // An interface method's values are its implementation's.
                if ($values === null && !$impl->isInterface() && $impl->implementsInterface($name)) {
                    $values = TABLE["{$impl->getName()}::{$m->getName()}"]['values'] ?? null;
                }
            }
            if ($values !== null) {
                $tags[] = '@return ' . implode('|', array_map(static fn($v) => "'$v'", $values));
            }
            $vis = $m->isPrivate() ? 'private' : ($m->isProtected() ? 'protected' : 'public');
            if ($m->isConstructor() && $vis === 'public' && refused_constructor($c, $m)) {
                $vis = 'private';
                $doc = $doc !== '' ? $doc : 'Not instantiable: PHP refuses `new ' . $c->getShortName() . '()`.';
            }
            $ret = $m->hasReturnType() ? $m->getReturnType() : ($m->hasTentativeReturnType() ? $m->getTentativeReturnType() : null);
            $sig = ($m->isFinal() && !$c->isFinal() ? 'final ' : '') . ($m->isAbstract() && !$c->isInterface() ? 'abstract ' : '')
                . "$vis " . ($m->isStatic() ? 'static ' : '') . 'function ' . $m->getName() . '('
                . implode(', ', array_map(static fn($p) => param_str($p, $where), $m->getParameters())) . ')'
                . ($ret !== null ? ': ' . type_str($ret) : '')
                . ($c->isInterface() || $m->isAbstract() ? ';' : ' {}');
            $body[] = docblock($doc, $tags, '        ') . "        $sig\n";
        }
        $out .= "    $head" . ($body === [] ? " {}\n" : " {\n" . implode("\n", $body) . "    }\n");
    }
    $out .= "}\n";
}
foreach (TABLE as $key => $entry) {
    [$class] = explode('::', $key);
    if (!class_exists($class) && !interface_exists($class)) {
        fail("the table in scripts/stubs.php names $key, which the extension does not declare");
    }
}
echo $out;
