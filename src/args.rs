//! Scalar parameters taken as PHP takes them.
//!
//! ext-php-rs converts an `i64` or `String` parameter only from a zval of exactly that
//! type and otherwise throws ``Invalid value given for argument `x`.``: `acquire(1234)`
//! failed even without `strict_types`, and the message named no type. These wrappers hold
//! the caller's zval and convert it in the method, with the argument's number and name:
//! the exact type is taken as is; a caller with `declare(strict_types=1)` gets a
//! `TypeError` for anything else (ints are still accepted where a float is expected, as
//! PHP does); a caller without it gets PHP's own weak-mode coercion (the engine's
//! `zend_parse_arg_*_weak`: `"3"` for an int, `5` for a float, with PHP's deprecations for
//! null and lossy floats), and a `TypeError` worded as PHP words them
//! (`CheckoutGuard\RateLimiter::acquire(): Argument #2 ($tokens) must be of type int,
//! array given`) for what even weak mode refuses.
//!
//! A shop id is `string|int`: an int is its decimal string (`acquire(1234)` decides for
//! shop `"1234"`). ext-php-rs declares no union types, so the parameter is declared
//! `mixed` and its declared type is set to `string|int` once per process
//! (`declare_types`) for Reflection, the stubs and the interface's inheritance
//! checks.

use std::borrow::Cow;
use std::ffi::CStr;
use std::sync::OnceLock;

use ext_php_rs::convert::{FromZvalMut, StubLiteral};
use ext_php_rs::exception::PhpException;
use ext_php_rs::ffi::{zend_long, zend_string, ZEND_ACC_STRICT_TYPES};
use ext_php_rs::flags::DataType;
use ext_php_rs::types::Zval;
use ext_php_rs::zend::{ce, ExecutorGlobals};

use crate::php_call::Ended;

type LongWeak = unsafe extern "C" fn(*mut Zval, *mut zend_long, u32) -> bool;
type DoubleWeak = unsafe extern "C" fn(*mut Zval, *mut f64, u32) -> bool;
type StrWeak = unsafe extern "C" fn(*mut Zval, *mut *mut zend_string, u32) -> bool;

/// The engine's weak-mode conversions (`zend_parse_arg_long_weak`, `_double_weak`,
/// `_str_weak`: ZEND_API with these signatures from PHP 8.0 to 8.5; ZEND_FASTCALL is the C
/// convention on x86-64 and aarch64), looked up at run time: declared as extern symbols
/// they would make the library fail to load anywhere but in PHP, as in php_call.rs.
struct Weak {
    long: Option<LongWeak>,
    double: Option<DoubleWeak>,
    str: Option<StrWeak>,
}

fn engine() -> &'static Weak {
    static WEAK: OnceLock<Weak> = OnceLock::new();
    WEAK.get_or_init(|| {
        // SAFETY: dlsym with NUL-terminated names; each symbol, when found, is the function
        // of the type it is transmuted to (the signatures above).
        unsafe {
            let find = |name: &CStr| libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
            let (l, d, s) = (
                find(c"zend_parse_arg_long_weak"),
                find(c"zend_parse_arg_double_weak"),
                find(c"zend_parse_arg_str_weak"),
            );
            Weak {
                long: (!l.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, LongWeak>(l)),
                double: (!d.is_null())
                    .then(|| std::mem::transmute::<*mut libc::c_void, DoubleWeak>(d)),
                str: (!s.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, StrWeak>(s)),
            }
        }
    })
}

unsafe fn zend_parse_arg_long_weak(arg: *mut Zval, dest: *mut zend_long, num: u32) -> bool {
    engine().long.is_some_and(|f| f(arg, dest, num))
}

unsafe fn zend_parse_arg_double_weak(arg: *mut Zval, dest: *mut f64, num: u32) -> bool {
    engine().double.is_some_and(|f| f(arg, dest, num))
}

unsafe fn zend_parse_arg_str_weak(arg: *mut Zval, dest: *mut *mut zend_string, num: u32) -> bool {
    engine().str.is_some_and(|f| f(arg, dest, num))
}

/// Which parameter of which method: for the messages.
#[derive(Clone, Copy)]
pub struct Param {
    pub function: &'static str,
    pub num: u32,
    pub name: &'static str,
}

impl Param {
    pub const fn new(function: &'static str, num: u32, name: &'static str) -> Self {
        Self {
            function,
            num,
            name,
        }
    }

    fn type_error(&self, expected: &str, given: &Zval) -> PhpException {
        PhpException::new(
            format!(
                "{}(): Argument #{} (${}) must be of type {expected}, {} given",
                self.function,
                self.num,
                self.name,
                given_type(given)
            ),
            0,
            ce::type_error(),
        )
    }
}

/// The type PHP's messages name for a value: a class name for an object.
fn given_type(z: &Zval) -> String {
    let z = z.dereference();
    if let Some(obj) = z.object() {
        // An anonymous class's name is "class@anonymous\0file:line$n": PHP's messages
        // show it up to the NUL, as a C string.
        let name = obj.get_class_name().unwrap_or_else(|_| "object".into());
        return match name.split_once('\0') {
            Some((shown, _)) => shown.to_string(),
            None => name,
        };
    }
    match z.get_type() {
        DataType::Null => "null".into(),
        DataType::True | DataType::False | DataType::Bool => "bool".into(),
        DataType::Long => "int".into(),
        DataType::Double => "float".into(),
        DataType::String => "string".into(),
        DataType::Array => "array".into(),
        DataType::Resource => "resource".into(),
        other => other.to_string(),
    }
}

/// `ZEND_ARG_USES_STRICT_TYPES()`: whether the code that called the running internal
/// function declared `strict_types=1` (a call from internal code, e.g. `call_user_func`,
/// is weak, as in PHP).
fn caller_uses_strict_types() -> bool {
    let eg = ExecutorGlobals::get();
    let ex = eg.current_execute_data;
    // SAFETY: the engine's frames, read during the call they describe.
    unsafe {
        if ex.is_null() {
            return false;
        }
        let prev = (*ex).prev_execute_data;
        if prev.is_null() || (*prev).func.is_null() {
            return false;
        }
        (*(*prev).func).common.fn_flags & ZEND_ACC_STRICT_TYPES != 0
    }
}

/// Runs one of the engine's weak conversions under php_call's rule: it may call PHP (the
/// application's error handler on a deprecation, an object's `__toString`), which may
/// throw, exit or bail out. `Ok(true)`: converted; `Ok(false)`: refused (a TypeError to
/// throw); `Err`: PHP's own exception, rethrown, or an exit left pending (ext-php-rs throws
/// nothing over a pending one).
fn weak(convert: impl FnOnce() -> bool) -> Result<bool, PhpException> {
    let mut converted = false;
    let ended = crate::php_call::call(|| {
        converted = convert();
        Ok(Zval::new())
    });
    match ended {
        Ended::Returned(_) => Ok(converted && !ExecutorGlobals::has_exception()),
        Ended::Threw(ex) => {
            let mut z = Zval::new();
            let mut ex = ex;
            z.set_object(&mut ex);
            drop(ex);
            Err(PhpException::from_message(String::new()).with_object(z))
        }
        // SAFETY: nothing this frame owns needs dropping; the caller's are plain borrows.
        Ended::Bailout => unsafe { crate::php_call::resume_bailout() },
        Ended::Exit | Ended::FatalExit | Ended::FiberDestroyed => {
            Err(PhpException::from_message(String::new()))
        }
        Ended::Failed(_) => Ok(false),
    }
}

/// After one of the engine's weak conversions failed: PHP's TypeError, unless the
/// conversion left an exception of its own (a user error handler that throws on a
/// deprecation, or exits): ext-php-rs then throws nothing over it and that one propagates.
fn refused(param: Param, expected: &str, given: &Zval) -> PhpException {
    param.type_error(expected, given)
}

/// The zval an argument arrived in: the call frame's slot, which PHP's own weak
/// conversions may rewrite in place (an object's `__toString`).
pub struct Given<'a, T> {
    zval: Option<&'a mut Zval>,
    default: T,
}

impl<T: Copy> Given<'_, T> {
    fn new_default(default: T) -> Self {
        Self {
            zval: None,
            default,
        }
    }
}

macro_rules! scalar_param {
    ($name:ident, $t:ty, $dt:expr) => {
        impl<'a> FromZvalMut<'a> for $name<'a> {
            const TYPE: DataType = $dt;
            fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
                Some($name(Given {
                    zval: Some(zval),
                    default: Default::default(),
                }))
            }
        }
    };
}

/// A parameter with a default (`int $tokens = 1`): declared nullable to ext-php-rs, so a
/// null reaches this module (PHP's deprecation in weak mode, its TypeError in strict mode)
/// instead of ext-php-rs's own message; `declare_types` removes the `?` again.
macro_rules! defaulted_param {
    ($name:ident, $t:ty, $dt:expr) => {
        pub struct $name<'a>(Given<'a, $t>);
        impl<'a> FromZvalMut<'a> for $name<'a> {
            const TYPE: DataType = $dt;
            const NULLABLE: bool = true;
            fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
                Some($name(Given {
                    zval: Some(zval),
                    default: Default::default(),
                }))
            }
            fn from_missing() -> Option<Self> {
                // Never used: every such parameter declares its default.
                Some($name(Given::new_default(Default::default())))
            }
        }
        impl From<$t> for $name<'_> {
            fn from(v: $t) -> Self {
                $name(Given::new_default(v))
            }
        }
        impl StubLiteral for $name<'_> {
            fn stub_literal(&self) -> String {
                self.0.default.stub_literal()
            }
        }
    };
}

/// An `int` parameter.
pub struct IntArg<'a>(Given<'a, i64>);
scalar_param!(IntArg, i64, DataType::Long);
defaulted_param!(IntOr, i64, DataType::Long);

fn long_of(z: &mut Zval, param: Param) -> Result<i64, PhpException> {
    if let Some(i) = z.long() {
        return Ok(i);
    }
    if caller_uses_strict_types() {
        return Err(param.type_error("int", z));
    }
    let mut out: zend_long = 0;
    let zp: *mut Zval = z;
    // SAFETY: a live argument slot of the running call; `param.num` is its number.
    if weak(|| unsafe { zend_parse_arg_long_weak(zp, &mut out, param.num) })? {
        return Ok(out);
    }
    Err(refused(param, "int", z))
}

impl IntArg<'_> {
    pub fn get(self, param: Param) -> Result<i64, PhpException> {
        match self.0.zval {
            None => Ok(self.0.default),
            Some(z) => long_of(z, param),
        }
    }
}

impl IntOr<'_> {
    pub fn get(self, param: Param) -> Result<i64, PhpException> {
        IntArg(self.0).get(param)
    }
}

/// A `float` parameter (an int is taken in strict mode too, as PHP does).
pub struct FloatArg<'a>(Given<'a, f64>);
scalar_param!(FloatArg, f64, DataType::Double);
defaulted_param!(FloatOr, f64, DataType::Double);

fn float_of(z: &mut Zval, param: Param) -> Result<f64, PhpException> {
    if let Some(f) = z.double() {
        return Ok(f);
    }
    if let Some(i) = z.long() {
        return Ok(i as f64);
    }
    if caller_uses_strict_types() {
        return Err(param.type_error("float", z));
    }
    let mut out = 0.0;
    let zp: *mut Zval = z;
    // SAFETY: as in IntArg::get.
    if weak(|| unsafe { zend_parse_arg_double_weak(zp, &mut out, param.num) })? {
        return Ok(out);
    }
    Err(refused(param, "float", z))
}

impl FloatArg<'_> {
    pub fn get(self, param: Param) -> Result<f64, PhpException> {
        match self.0.zval {
            None => Ok(self.0.default),
            Some(z) => float_of(z, param),
        }
    }
}

impl FloatOr<'_> {
    pub fn get(self, param: Param) -> Result<f64, PhpException> {
        FloatArg(self.0).get(param)
    }
}

/// A `bool` parameter.
pub struct BoolArg<'a>(Given<'a, bool>);
scalar_param!(BoolArg, bool, DataType::Bool);
defaulted_param!(BoolOr, bool, DataType::Bool);

impl BoolArg<'_> {
    pub fn get(self, param: Param) -> Result<bool, PhpException> {
        let Some(z) = self.0.zval else {
            return Ok(self.0.default);
        };
        if let Some(b) = z.bool() {
            return Ok(b);
        }
        if caller_uses_strict_types() || z.is_array() || z.is_object() {
            return Err(param.type_error("bool", z));
        }
        if z.is_null() {
            // PHP's deprecation for null to a scalar parameter in weak mode, then false.
            let mut out: zend_long = 0;
            let zp: *mut Zval = z;
            // SAFETY: as in long_of; null converts to 0 after the deprecation.
            if weak(|| unsafe { zend_parse_arg_long_weak(zp, &mut out, param.num) })? {
                return Ok(false);
            }
            return Err(refused(param, "bool", z));
        }
        // Weak mode: a scalar is its truth value (zend_parse_arg_bool_weak's rule).
        Ok(z.coerce_to_bool())
    }
}

impl BoolOr<'_> {
    pub fn get(self, param: Param) -> Result<bool, PhpException> {
        BoolArg(self.0).get(param)
    }
}

/// A `?float` parameter whose default is null.
pub struct OptFloatArg<'a>(Option<&'a mut Zval>);

impl<'a> FromZvalMut<'a> for OptFloatArg<'a> {
    const TYPE: DataType = DataType::Double;
    const NULLABLE: bool = true;
    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        Some(OptFloatArg((!zval.is_null()).then_some(zval)))
    }
    fn from_missing() -> Option<Self> {
        Some(OptFloatArg(None))
    }
}

impl OptFloatArg<'_> {
    pub fn get(self, param: Param) -> Result<Option<f64>, PhpException> {
        self.0.map(|z| float_of(z, param)).transpose()
    }
}

/// A `?bool` parameter whose default is null.
pub struct OptBoolArg<'a>(Option<&'a mut Zval>);

impl<'a> FromZvalMut<'a> for OptBoolArg<'a> {
    const TYPE: DataType = DataType::Bool;
    const NULLABLE: bool = true;
    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        Some(OptBoolArg((!zval.is_null()).then_some(zval)))
    }
    fn from_missing() -> Option<Self> {
        Some(OptBoolArg(None))
    }
}

impl OptBoolArg<'_> {
    pub fn get(self, param: Param) -> Result<Option<bool>, PhpException> {
        self.0
            .map(|z| {
                BoolArg(Given {
                    zval: Some(z),
                    default: false,
                })
                .get(param)
            })
            .transpose()
    }
}

/// A `?string` parameter whose default is null.
pub struct OptStringArg<'a>(Option<&'a mut Zval>);

impl<'a> FromZvalMut<'a> for OptStringArg<'a> {
    const TYPE: DataType = DataType::String;
    const NULLABLE: bool = true;
    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        Some(OptStringArg((!zval.is_null()).then_some(zval)))
    }
    fn from_missing() -> Option<Self> {
        Some(OptStringArg(None))
    }
}

impl OptStringArg<'_> {
    pub fn get(self, param: Param) -> Result<Option<Vec<u8>>, PhpException> {
        self.0
            .map(|z| string_of(z, param, "?string").map(Cow::into_owned))
            .transpose()
    }
}

fn string_of<'z>(
    z: &'z mut Zval,
    param: Param,
    expected: &str,
) -> Result<Cow<'z, [u8]>, PhpException> {
    if z.is_string() {
        return Ok(Cow::Borrowed(
            z.zend_str().map(|s| s.as_bytes()).unwrap_or(b""),
        ));
    }
    if caller_uses_strict_types() {
        return Err(param.type_error(expected, z));
    }
    let mut out: *mut zend_string = std::ptr::null_mut();
    let zp: *mut Zval = z;
    // SAFETY: as in IntArg::get; on success `out` points to a string the zval owns.
    if weak(|| unsafe { zend_parse_arg_str_weak(zp, &mut out, param.num) })? && !out.is_null() {
        // SAFETY: the string lives in the argument slot for the rest of the call.
        let bytes =
            unsafe { std::slice::from_raw_parts((*out).val.as_ptr().cast::<u8>(), (*out).len) };
        return Ok(Cow::Owned(bytes.to_vec()));
    }
    Err(refused(param, expected, z))
}

/// A `string` parameter.
pub struct StrArg<'a>(&'a mut Zval);

impl<'a> FromZvalMut<'a> for StrArg<'a> {
    const TYPE: DataType = DataType::String;
    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        Some(StrArg(zval))
    }
}

impl<'a> StrArg<'a> {
    pub fn get(self, param: Param) -> Result<Cow<'a, [u8]>, PhpException> {
        string_of(self.0, param, "string")
    }
}

/// A shop id, `string|int`: an int is its decimal string.
pub struct ShopIdArg<'a>(&'a mut Zval);

impl<'a> FromZvalMut<'a> for ShopIdArg<'a> {
    const TYPE: DataType = DataType::Mixed;
    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        Some(ShopIdArg(zval))
    }
}

impl<'a> ShopIdArg<'a> {
    pub fn get(self, param: Param) -> Result<Cow<'a, [u8]>, PhpException> {
        let z = self.0;
        if let Some(i) = z.long() {
            return Ok(Cow::Owned(i.to_string().into_bytes()));
        }
        if z.is_string() {
            return string_of(z, param, "string|int");
        }
        if caller_uses_strict_types() {
            return Err(param.type_error("string|int", z));
        }
        // Weak mode, as PHP's Z_PARAM_STR_OR_LONG: an int if it can be one (a float with
        // no fraction, a bool), else a string (an object's __toString).
        if z.double().is_some() || z.bool().is_some() || z.is_null() {
            let mut out: zend_long = 0;
            let zp: *mut Zval = z;
            // SAFETY: as in IntArg::get.
            if weak(|| unsafe { zend_parse_arg_long_weak(zp, &mut out, param.num) })? {
                return Ok(Cow::Owned(out.to_string().into_bytes()));
            }
        }
        string_of(z, param, "string|int")
    }
}

/// `MAY_BE_LONG | MAY_BE_STRING`, the bits of a `string|int` declaration.
const MAY_BE_STRING_OR_LONG: u32 = (1 << 4) | (1 << 6);
/// `MAY_BE_NULL`: the `?` of a declaration.
const MAY_BE_NULL: u32 = 1 << 1;
/// The bits of a zend_type that say which types it allows (below the extra flags).
const TYPE_MASK: u32 = (1 << 25) - 1;

/// Declares the types ext-php-rs cannot: every `$shopId` parameter of `class`'s methods
/// `string|int` (declared `mixed`: ext-php-rs has no union types), and a parameter with a
/// default other than null not nullable (declared `?int` so that a null reaches this
/// module: see `defaulted_param!`). Runs once per process, before any PHP code of a request
/// could reflect on them or implement the interface.
///
/// # Safety
/// MINIT or the first RINIT of a process (no request running in another thread).
pub unsafe fn declare_types(class: &ext_php_rs::zend::ClassEntry) {
    use ext_php_rs::ffi::zend_function;
    for (_, f) in class.function_table.iter() {
        let Some(func) = f.ptr::<zend_function>() else {
            continue;
        };
        let common = &mut (*func).common;
        let args = common.arg_info;
        if args.is_null() {
            continue;
        }
        for i in 0..common.num_args as usize {
            let arg = &mut *args.add(i);
            if arg.name.is_null() {
                continue;
            }
            // Internal functions' arg_info hold C strings (zend_internal_arg_info).
            let name = CStr::from_ptr(arg.name as *const std::ffi::c_char);
            if name.to_bytes() == b"shopId" {
                arg.type_.type_mask = (arg.type_.type_mask & !TYPE_MASK) | MAY_BE_STRING_OR_LONG;
                continue;
            }
            let default = arg.default_value as *const std::ffi::c_char;
            if !default.is_null() && CStr::from_ptr(default).to_bytes() != b"null" {
                arg.type_.type_mask &= !MAY_BE_NULL;
            }
        }
    }
}
