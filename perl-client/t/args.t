#!/usr/bin/perl
# Argument decoding as upstream's binding does it (binding.md 6.2), without a server: perlmod
# decides by a scalar's body type, so a string Perl has used as a number is a number too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use CRSBridgeTest;
use CRSBridge::Args qw(arg_usize arg_f64 arg_string arg_opt_string arg_bool arg_struct arg_string_list check_arity);
use CRSBridge::Codec qw(json_num json_str);
use CRSBridge::Records qw(candidates_param);

subtest 'usize' => sub {
    is(arg_usize(7), 7, 'integer');
    is(arg_usize(7.9), 7, 'float truncated toward zero');
    is(arg_usize(20e9), 20000000000, 'large float');
    my $s = '12';
    my $used = $s * 1;
    is(arg_usize($s), 12, 'a string used as a number');
    is(error_of { arg_usize('12') }, qq(error: invalid type: string "12", expected usize\n), 'a plain string');
    is(error_of { arg_usize(-0.5) }, '', '-0.5 truncates to 0');
    is(error_of { arg_usize(-2) }, "error: invalid value: integer `-2`, expected usize\n", 'negative');
    is(error_of { arg_usize(undef) }, "error: invalid type: unit value, expected usize\n", 'undef');
    is(error_of { arg_usize([]) }, "error: invalid type: sequence, expected usize\n", 'array');
    is(arg_usize(\5), 5, 'a reference is followed');
};

subtest 'f64' => sub {
    is(arg_f64(1.5), 1.5, 'float');
    is(arg_f64(3), 3, 'integer');
    my $s = '2.25';
    my $used = $s + 0;
    is(arg_f64($s), 2.25, 'a string used as a number');
    is(error_of { arg_f64('2') }, qq(error: invalid type: string "2", expected f64\n), 'a plain string');
    is(error_of { arg_f64(undef) }, "error: invalid type: unit value, expected f64\n", 'undef');
    is(arg_f64(18446744073709551615), -1, 'an unsigned integer past 2**63 wraps, as SvIV reads it');
    is(arg_f64(1.8446744073709552e19), 1.8446744073709552e19, 'a float does not');
};

subtest 'string, option, bool' => sub {
    is(arg_string('node1'), 'node1', 'string');
    my $n = 5;
    my $text = "$n";    # stringified: now it has a string body too
    is(arg_string($n), '5', 'a number Perl has used as a string');
    is(error_of { arg_string(5) }, "error: invalid type: integer `5`, expected a string\n", 'integer');
    is(error_of { arg_string(1.5) }, "error: invalid type: floating point `1.5`, expected a string\n", 'float');
    is(error_of { arg_string({}) }, "error: invalid type: map, expected a string\n", 'hash');
    is(arg_opt_string(undef), undef, 'option: undef is none');
    is(arg_bool(1), 1, 'true');
    is(arg_bool(0), 0, 'false');
    is(arg_bool(undef), 0, 'undef is false');
    is(arg_bool(!!1), 1, 'a Perl boolean');
    is(arg_bool(\1), 1, 'a reference to a number (like JSON::PP::true)');
    is(error_of { arg_bool('1') }, "error: expected bool value\n", 'a plain string');
};

subtest 'struct and arity' => sub {
    my @fields = (a => \&arg_usize, b => \&arg_opt_string);
    is_deeply(arg_struct([ 1, 'x' ], 'S', \@fields), { a => 1, b => 'x' }, 'positional');
    is_deeply(arg_struct({ a => 1, c => [] }, 'S', \@fields, 1), { a => 1 }, 'an optional field absent, unknown keys ignored');
    is(error_of { arg_struct([1], 'S', \@fields, 1) }, "error: invalid length 1, expected struct S with 2 elements\n",
        'too short, even when only the optional field is missing');
    is(error_of { arg_struct([ 'x' ], 'S', \@fields) }, qq(error: invalid type: string "x", expected usize\n),
        'elements are decoded in order before the length is judged');
    is(error_of { arg_struct({ b => 5 }, 'S', \@fields) }, "error: invalid type: integer `5`, expected a string\n",
        'an invalid field beats a missing one');
    is(error_of { arg_struct('x', 'S', \@fields) }, qq(error: invalid type: string "x", expected struct S\n),
        'not a struct');
    eval { arg_struct(1.5, 'S', \@fields) } for 1 .. 2;    # once a float has passed (a lexical copy would keep its body)
    is(error_of { arg_struct(5, 'S', \@fields) }, "error: invalid type: integer `5`, expected struct S\n",
        'an integer is still an integer');
    eval { arg_string_list(1.5) } for 1 .. 2;
    is(error_of { arg_string_list(-1) }, "error: invalid type: integer `-1`, expected a sequence\n", 'in a list too');
    is(error_of { check_arity('f', [ 1, 2, 3 ], qw(this a)) }, "too many parameters for function 'f', (expected 2)\n",
        'too many');
    is(error_of { check_arity('f', [1], qw(this a)) }, "missing required parameter: 'a'\n", 'missing');
};

subtest 'candidates' => sub {
    my $plain = candidates_param([ { leader => 'vm:1', resources => ['vm:1'], nodes => [qw(n1 n2)] } ]);
    is($plain, '[{"leader":"vm:1","resources":["vm:1"],"nodes":["n1","n2"]}]', 'rendered');
    is(candidates_param([ { leader => 'vm:1', resources => ['vm:1'], nodes => [ 'a"b', "9x" ] } ]),
        '[{"leader":"vm:1","resources":["vm:1"],"nodes":["a\"b","9x"]}]', 'escapes and digit names');
    is(error_of { candidates_param([ { leader => 'vm:1', resources => ['vm:1'], nodes => [undef] } ]) },
        "error: invalid type: Option value, expected a string\n", 'undef name');
    is(error_of { candidates_param([ { leader => 'vm:1', resources => ['vm:1'], nodes => [ {} ] } ]) },
        "error: invalid type: map, expected a string\n", 'hash as a name');
    is(error_of { candidates_param([ { leader => 'vm:1', resources => 'vm:1', nodes => [] } ]) },
        qq(error: invalid type: string "vm:1", expected a sequence\n), 'a string as a list');
    is(error_of { candidates_param(undef) }, "error: invalid type: Option value, expected a sequence\n", 'undef');
};

subtest 'numbers on the wire' => sub {
    for my $value (0.1, 1 / 3, 15.184, 2**-1074, 1e300, 2**53, 0.0, 4) {
        is(unpack('H*', pack('d>', 0 + json_num($value))), unpack('H*', pack('d>', $value)),
            "json_num($value) reads back as the same double");
    }
    is(json_str(qq(a"\\\n\x01)), q("a\"\\\\\n\u0001"), 'string escapes');
};

done_testing();
