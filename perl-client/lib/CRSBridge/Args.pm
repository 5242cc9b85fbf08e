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
    arg_usize arg_f64 arg_string arg_str arg_opt_string arg_bool arg_struct arg_string_list
    out_of_bounds_cores out_of_bounds_bytes check_finite finite_problem plain_number
    MAX_BYTES MAX_CORES
);

# Largest byte count and core count crs-bridge accepts (core/limits.py).
use constant MAX_BYTES => 4611686018427387903;    # 2**62 - 1
use constant MAX_CORES => 9007199254740992;       # 2**53

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
# perlmod hands undef to a visitor that prefers a string (strings, records, lists) as an
# Option's none, and to one that prefers a number (arg_usize, arg_f64) as a unit value.
sub _unexpected {
    my $v = $_[0];
    return 'Option value' if !defined $v;
    my $ref = ref $v;
    return 'map' if $ref eq 'HASH' || (Scalar::Util::reftype($v) // '') eq 'HASH';
    return 'sequence' if $ref eq 'ARRAY' || (Scalar::Util::reftype($v) // '') eq 'ARRAY';
    return 'other' if $ref;
    if (!_string_only($_[0]) && _plain_number($_[0])) {
        my $class = ref B::svref_2object(\$_[0]);
        # perlmod's i64 of it (SvIV: an unsigned integer past 2**63 wraps); PVIV: see arg_string_list
        return "integer `" . _sv_iv($_[0]) . "`" if $class eq 'B::IV' || $class eq 'B::PVIV';
        return 'floating point `' . _rust_float($v) . '`';
    }
    (my $quoted = "$v") =~ s/(["\\])/\\$1/g;
    $quoted =~ s/\n/\\n/g;
    $quoted =~ s/\t/\\t/g;
    $quoted =~ s/\r/\\r/g;
    return qq(string "$quoted");
}

# serde's text of a float in an "invalid type" error: Rust's Display (the shortest digits that
# read back as the same double, never an exponent), ".0" added to an integral value; inf, NaN.
sub _rust_float {
    my ($v) = @_;
    return 'NaN' if $v != $v;
    return $v > 0 ? 'inf' : '-inf' if $v * 0 != 0;
    my $e;
    for my $digits (1 .. 17) {
        $e = sprintf('%.*e', $digits - 1, $v);
        last if $e == $v;
    }
    my ($sign, $lead, $rest, $exp) = $e =~ /^(-?)(\d)\.?(\d*)e([-+]\d+)$/;
    (my $mantissa = $lead . $rest) =~ s/0+$//;
    $mantissa = '0' if $mantissa eq '';
    my $point = $exp + 1;    # digits before the decimal point
    my $text = $point <= 0 ? '0.' . ('0' x -$point) . $mantissa
        : $point >= length $mantissa ? $mantissa . ('0' x ($point - length $mantissa)) . '.0'
        : substr($mantissa, 0, $point) . '.' . substr($mantissa, $point);
    return $sign . $text;
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

An unsigned integer as upstream decodes a C<usize>: perlmod takes a number's (and a string's
Perl has used as a number) integer value as Perl's C<SvIV> gives it: truncated toward zero,
and past the signed 64-bit range wrapped (2**63 reads as -2**63, 1e30 and inf as -1, -inf as
-2**63, NaN as 0). Plain strings, undef and negative values die with serde's text. Returns
the integer.

=cut

sub arg_usize {
    return arg_usize(${ $_[0] }) if _scalar_ref($_[0]);
    die "error: invalid type: unit value, expected usize\n" if !defined $_[0];
    _type_error('usize', $_[0]) if ref $_[0] || _string_only($_[0]);
    my $iv = _sv_iv($_[0]);
    die "error: invalid value: integer `$iv`, expected usize\n" if $iv < 0;
    return $iv;
}

# Perl's SvIV of a number: integer arithmetic reads its operands with it.
sub _sv_iv {
    use integer;
    no warnings 'numeric';
    return $_[0] + 0;
}

=head2 arg_f64($value)

A floating point number as upstream decodes an C<f64>: numbers and strings Perl has used as
numbers are accepted (an integer as C<SvIV> reads it: 2**64 - 1 held as an unsigned integer
is -1), plain strings (C<"2"> read from a file and never used as a number) and undef die with
serde's text. Returns the number.

=cut

sub arg_f64 {
    return arg_f64(${ $_[0] }) if _scalar_ref($_[0]);
    die "error: invalid type: unit value, expected f64\n" if !defined $_[0];
    _type_error('f64', $_[0]) if ref $_[0] || _string_only($_[0]);
    my $class = ref B::svref_2object(\$_[0]);
    # perlmod reads a number without a float part by SvIV: an unsigned integer past 2**63 wraps.
    return 0 + _sv_iv($_[0]) if $class eq 'B::IV' || $class eq 'B::PVIV';
    no warnings 'numeric';
    return 0 + $_[0];
}

=head2 arg_string($value) / arg_str($value)

A string as upstream decodes a C<String> (C<arg_string>) or a C<&str> (C<arg_str>, the name
parameters of C<remove_node>, C<contains_node>, the removes and C<add_service_usage_to_node>):
anything with a string body (stringified); a pure integer or floating point number, undef, or
a hash or array reference dies with serde's text, which expects C<a string> or C<a borrowed
string>.

=cut

sub arg_string {
    if (!ref $_[0] && defined $_[0] && !_plain_number($_[0])) {
        return utf8::is_utf8($_[0]) ? _unicode("$_[0]") : "$_[0]";    # (only flagged strings hold non-characters)
    }
    return _string($_[0], 'a string');
}

sub arg_str {
    return _unicode("$_[0]") if !ref $_[0] && defined $_[0] && !_plain_number($_[0]);
    return _string($_[0], 'a borrowed string');
}

sub _string {
    my $expected = $_[1];
    return _string(${ $_[0] }, $expected) if _scalar_ref($_[0]);
    _type_error($expected, $_[0]) if !defined $_[0] || ref $_[0];
    my $class = ref B::svref_2object(\$_[0]);
    _type_error($expected, $_[0]) if $class eq 'B::IV' || $class eq 'B::NV';
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
C<error: expected bool value>, an array or hash reference with serde's C<invalid type:
sequence, expected a boolean>. Returns 1 or 0.

=cut

sub arg_bool {
    return arg_bool(${ $_[0] }) if _scalar_ref($_[0]);
    return 0 if !defined $_[0];
    _type_error('a boolean', $_[0]) if ref $_[0];
    die "error: expected bool value\n" if _string_only($_[0]);
    return $_[0] ? 1 : 0;
}

=head2 arg_struct($value, $struct_name, [ field => \&decoder, ... ], $required)

Decodes C<$value> as the named serde struct, each field with its decoder (which takes the
caller's scalar, see the top), and returns a hash reference of the decoded fields. The first
C<$required> fields (all by default) must be present; an absent optional field is absent from
the result. Dies with serde's text, in serde's order:

=over

=item a hash reference

walked in the hash's own order (perlmod's, which is Perl's C<keys> order of that hash), each
known field decoded when it is met, unknown keys ignored; only then C<missing field `name`>
for the first absent required field in declaration order. So an invalid field beats a
missing one.

=item an array reference

its elements are the fields by position, decoded in order; every field must be there, the
optional ones too: C<invalid length 3, expected struct PveResource with 4 elements> names the
elements there are. Elements past the fields are ignored.

=item anything else

C<invalid type: ..., expected struct NAME> (undef: C<Option value>).

=back

=cut

sub arg_struct {
    return arg_struct(${ $_[0] }, @_[ 1 .. $#_ ]) if _scalar_ref($_[0]);
    my ($value, $struct, $spec, $required) = @_;    # $_[0] stays the caller's scalar, for _type_error
    my $type = ref $value ? Scalar::Util::reftype($value) : '';
    my @fields = @$spec[ grep { $_ % 2 == 0 } 0 .. $#$spec ];
    my %decoder = @$spec;
    my %out;
    if ($type eq 'HASH') {
        for my $key (keys %$value) {
            my $decode = $decoder{$key} or next;
            $out{$key} = $decode->($value->{$key});
        }
        exists $out{$_} or die "error: missing field `$_`\n" for @fields[ 0 .. ($required // @fields) - 1 ];
        return \%out;
    }
    _type_error("struct $struct", $_[0]) if $type ne 'ARRAY';
    for my $i (0 .. $#fields) {
        die "error: invalid length $i, expected struct $struct with ${\ scalar @fields} elements\n" if $i > $#$value;
        $out{ $fields[$i] } = $decoder{ $fields[$i] }->($value->[$i]);
    }
    return \%out;
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
    return arg_string_list(${ $_[0] }) if _scalar_ref($_[0]);
    # The caller's scalar itself: a copy's body type is the copy's (a lexical keeps the body a
    # float once gave it), not the value's.
    _type_error('a sequence', $_[0]) if (ref $_[0] ? Scalar::Util::reftype($_[0]) : '') ne 'ARRAY';
    my @out;
    for (@{ $_[0] }) {
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

=head2 check_finite($field, $value) / finite_problem($field, $value)

C<check_finite> dies when a decoded number is infinite or NaN (JSON cannot carry it; upstream
would compute NaN with it), with the server's wording for the same error, and returns the
value; C<finite_problem> returns that message (undef for a finite number), for a caller that
must raise upstream's errors of the same call first.

=cut

sub finite_problem {
    my ($field, $value) = @_;
    return undef if $value == $value && $value * 0 == 0;
    return "Invalid params: $field: Input should be a finite number\n";
}

sub check_finite {
    my $problem = finite_problem(@_);
    die $problem if $problem;
    return $_[1];
}

1;
