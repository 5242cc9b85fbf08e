package CRSBridge::Args;

# Argument decoding as upstream's binding does it (perlmod + serde, binding.md section 6.2),
# with upstream's error texts, and crs-bridge's own bounds on the decoded values (product
# decision 4: refuse what upstream would turn into NaN or garbage). Every decoder takes the
# caller's scalar as $_[0] (an alias), because perlmod decides by the scalar's internal body
# type: a string "4" is refused where a number is expected, but a string that Perl has already
# used as a number is accepted.

use strict;
use warnings;

use B ();
use Exporter 'import';
use Scalar::Util ();

our @EXPORT_OK = qw(
    check_arity check_invocant
    arg_usize arg_f64 arg_string arg_opt_string arg_bool arg_struct arg_string_list missing_field
    out_of_bounds_cores out_of_bounds_bytes check_finite plain_number
    MAX_BYTES MAX_CORES
);

# Largest byte count and core count crs-bridge accepts (core/limits.py).
use constant MAX_BYTES => 4611686018427387903;    # 2**62 - 1
use constant MAX_CORES => 9007199254740992;       # 2**53
use constant IV_MAX => 9223372036854775807;

BEGIN {
    warnings->unimport('experimental::builtin') if $] >= 5.036;
    # Whether a scalar holds a number and no string (then it has an integer or double body):
    # builtin::created_as_number on perl >= 5.36, the same test on the flags before.
    *plain_number = defined &builtin::created_as_number ? \&builtin::created_as_number : sub {
        return 0 if !defined $_[0] || ref $_[0];
        my $flags = B::svref_2object(\$_[0])->FLAGS;
        return ($flags & (B::SVf_IOK | B::SVf_NOK)) && !($flags & B::SVf_POK) ? 1 : 0;
    };
    *_plain_number = \&plain_number;
}

=head1 NAME

CRSBridge::Args - decode binding arguments as libpve-rs-perl does, with its error texts

=head1 DESCRIPTION

All errors are thrown as strings ending in a newline. Decoding errors carry perlmod's
C<error: > prefix (C<error: invalid type: string "abc", expected usize>); arity errors have
none; the one value error worded here (a non-finite number) uses the server's wording.

=head2 check_arity($function, \@args, @param_names)

Dies like perlmod when C<@args> (invocant included) has more or fewer elements than
C<@param_names>: C<too many parameters for function 'add_node', (expected 4)> or
C<missing required parameter: 'maxmem'>.

=cut

sub check_arity {
    my ($function, $args, @names) = @_;
    my $count = @$args;
    return if $count == @names;
    die "too many parameters for function '$function', (expected ${\ scalar @names})\n"
        if $count > @names;
    die "missing required parameter: '$names[$count]'\n";
}

=head2 check_invocant($self, $package)

Dies like perlmod when a method is called on something that is not one of our objects.

=cut

sub check_invocant {
    my ($self, $package) = @_;
    die "value blessed into $package was not a reference\n" if !ref $self;
    die "value blessed into $package did not contain its declared magic pointer\n"
        if !eval { $self->isa('CRSBridge::Scheduler') } || !exists $self->{_crs};
    return;
}

# perlmod classifies a defined scalar by its body type; only a plain string (PV) lacks the
# integer flag.
sub _string_only {
    return 0 if _plain_number($_[0]);
    return ref(B::svref_2object(\$_[0])) eq 'B::PV';
}

# serde's description of an unexpected value ("string \"abc\"", "integer `5`", "map" ...).
sub _unexpected {
    my $v = $_[0];
    return 'unit value' if !defined $v;
    my $ref = ref $v;
    return 'map' if $ref eq 'HASH' || (Scalar::Util::reftype($v) // '') eq 'HASH';
    return 'sequence' if $ref eq 'ARRAY' || (Scalar::Util::reftype($v) // '') eq 'ARRAY';
    return 'other' if $ref;
    if (!_string_only($_[0]) && _plain_number($_[0])) {
        my $class = ref B::svref_2object(\$_[0]);
        return "integer `" . int($v) . "`" if $class eq 'B::IV' || $class eq 'B::PVIV';    # PVIV: see arg_string_list
        return 'floating point `' . _rust_float($v) . '`';
    }
    (my $quoted = "$v") =~ s/(["\\])/\\$1/g;
    $quoted =~ s/\n/\\n/g;
    $quoted =~ s/\t/\\t/g;
    $quoted =~ s/\r/\\r/g;
    return qq(string "$quoted");
}

sub _rust_float {
    my ($v) = @_;
    return 'NaN' if $v != $v;
    return $v > 0 ? 'inf' : '-inf' if $v * 0 != 0;
    return sprintf('%.1f', $v) if $v == int($v) && abs($v) < 1e16;
    my $s = sprintf('%.15g', $v);
    return $s == $v ? $s : sprintf('%.17g', $v);
}

sub _type_error {
    my ($expected) = @_;
    die "error: invalid type: " . _unexpected($_[1]) . ", expected $expected\n";
}

sub _scalar_ref {
    my $ref = ref $_[0];
    return 0 if !$ref;
    my $type = Scalar::Util::reftype($_[0]) // '';
    return $type eq 'SCALAR' || $type eq 'REF';
}

=head2 arg_usize($value)

An unsigned integer as upstream decodes a C<usize>: numbers (and strings Perl has used as
numbers) are truncated toward zero; plain strings, undef and negative values die with serde's
text. Returns the integer.

=cut

sub arg_usize {
    return arg_usize(${ $_[0] }) if _scalar_ref($_[0]);
    _type_error('usize', $_[0]) if !defined $_[0] || ref $_[0] || _string_only($_[0]);
    my $iv = do { no warnings 'numeric'; int($_[0]) };
    $iv = 0 if $iv != $iv;
    $iv = IV_MAX if $iv > IV_MAX;
    $iv = -IV_MAX - 1 if $iv < -IV_MAX - 1;
    die "error: invalid value: integer `" . sprintf('%d', $iv) . "`, expected usize\n" if $iv < 0;
    return $iv;
}

=head2 arg_f64($value)

A floating point number as upstream decodes an C<f64>: numbers and strings Perl has used as
numbers are accepted, plain strings (C<"2"> read from a file and never used as a number) and
undef die with serde's text. Returns the number.

=cut

sub arg_f64 {
    return arg_f64(${ $_[0] }) if _scalar_ref($_[0]);
    _type_error('f64', $_[0]) if !defined $_[0] || ref $_[0] || _string_only($_[0]);
    no warnings 'numeric';
    return 0 + $_[0];
}

=head2 arg_string($value)

A string as upstream decodes a C<String>: anything with a string body (stringified); a pure
integer or floating point number, undef, or a hash or array reference dies with serde's text.

=cut

sub arg_string {
    return _unicode("$_[0]") if !ref $_[0] && defined $_[0] && !_plain_number($_[0]);
    return arg_string(${ $_[0] }) if _scalar_ref($_[0]);
    _type_error('a string', $_[0]) if !defined $_[0] || ref $_[0];
    my $class = ref B::svref_2object(\$_[0]);
    _type_error('a string', $_[0]) if $class eq 'B::IV' || $class eq 'B::NV';
    return _unicode("$_[0]");
}

# The string, if UTF-8 can carry it: a character that is no Unicode scalar value (a surrogate,
# or a code point past U+10FFFF, which only strings with Perl's UTF-8 flag hold) would make the
# whole message the string goes in unreadable to the server, other objects' buffered calls
# with it; refused here, at the call that brings it.
sub _unicode {
    return $_[0] if !utf8::is_utf8($_[0]) || $_[0] !~ /([\x{D800}-\x{DFFF}]|[^\x{0}-\x{10FFFF}])/;
    die sprintf("error: invalid value: a string holding U+%04X, which is no Unicode character, expected a string\n",
        ord $1);
}

=head2 arg_opt_string($value)

An C<Option<String>>: undef gives undef, anything else as C<arg_string>.

=cut

sub arg_opt_string {
    return undef if !defined $_[0];
    return arg_string($_[0]);
}

=head2 arg_bool($value)

A boolean as upstream decodes a C<bool>: Perl truthiness of numbers and undef (and of
referenced scalars such as JSON::PP::Boolean); a plain string (even C<"1">) dies with
C<error: expected bool value>. Returns 1 or 0.

=cut

sub arg_bool {
    return arg_bool(${ $_[0] }) if _scalar_ref($_[0]);
    return 0 if !defined $_[0];
    die "error: expected bool value\n" if ref $_[0] || _string_only($_[0]);
    return $_[0] ? 1 : 0;
}

=head2 arg_struct($value, $struct_name, \@fields, $required)

Checks that C<$value> can be decoded as the named serde struct and returns a hash reference
of its fields: the caller's hash itself (so the values keep their identity), or, for an array
reference, its elements by position (serde accepts both). Unknown keys are ignored. The caller
then decodes the fields in declaration order and calls C<missing_field> for absent required
ones. C<$required> is the number of leading fields that are not optional.

=cut

sub arg_struct {
    my ($struct, $fields, $required) = @_[1, 2, 3];
    my $value = $_[0];
    $value = $$value while _scalar_ref($value);
    my $type = ref $value ? Scalar::Util::reftype($value) : '';
    return $value if $type eq 'HASH';
    if ($type eq 'ARRAY') {
        die "error: invalid length ${\ scalar @$value}, expected struct $struct with ${\ scalar @$fields} elements\n"
            if @$value < ($required // @$fields);
        my %hash;
        my $last = $#$value < $#$fields ? $#$value : $#$fields;
        @hash{ @$fields[0 .. $last] } = @$value[0 .. $last];
        return \%hash;
    }
    _type_error("struct $struct", $value);
}

=head2 missing_field($name)

Dies with serde's C<error: missing field `name`>.

=cut

sub missing_field {
    die "error: missing field `$_[0]`\n";
}

=head2 arg_string_list($value)

A C<Vec<String>>: an array reference of strings. Returns a new array reference of the
stringified elements. An element created as a number is refused as upstream refuses a pure
integer or float, even if it has a string body by now: the client's own C<join> of a name list
(CRSBridge::Records, a lookup that must not cost a check per element) gives numbers one. The
price: a number the caller had stringified itself, which upstream takes as a string, is
refused too (perl >= 5.36; before, such elements pass as strings).

=cut

sub arg_string_list {
    my $value = $_[0];
    $value = $$value while _scalar_ref($value);
    _type_error('a sequence', $value) if (ref $value ? Scalar::Util::reftype($value) : '') ne 'ARRAY';
    my @out;
    for (@$value) {
        _type_error('a string', $_) if _plain_number($_);
        push @out, (!ref $_ && defined $_ && !utf8::is_utf8($_)) ? "$_" : arg_string($_);
    }
    return \@out;
}

=head2 out_of_bounds_cores($value, $positive) / out_of_bounds_bytes($value, $positive)

crs-bridge's own bounds (product decision 4) on a decoded core count (not negative, at most
2**53, not 0 with C<$positive>) or byte count (at most 2**62 - 1, not 0 with C<$positive>).
True when the server will refuse the value: the caller then lets the server say why (its
message names the field), so the client never words these errors itself.

=cut

sub out_of_bounds_cores {
    my ($value, $positive) = @_;
    return $value < 0 || $value > MAX_CORES || ($positive && $value == 0);
}

sub out_of_bounds_bytes {
    my ($value, $positive) = @_;
    return $value > MAX_BYTES || ($positive && $value == 0);
}

=head2 check_finite($field, $value)

Dies when a decoded number is infinite or NaN (JSON cannot carry it; upstream would compute
NaN with it), with the server's wording for the same error. Returns the value.

=cut

sub check_finite {
    my ($field, $value) = @_;
    die "Invalid params: $field: Input should be a finite number\n"
        if $value != $value || $value * 0 != 0;
    return $value;
}

1;
