#!/usr/bin/perl
# CRSBridge::Codec's JSON writers read back as what they were given (the fast path of string
# lists included: names with quotes, backslashes, control characters, separators' look-alikes),
# and its reader of the server's answers gives what JSON::PP gives, bit for bit, taking the
# common answers (a number, scored migrations of plain names) without it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use B ();
use JSON::PP;
use Test::More;
use CRSBridge::Codec qw(decode_answer json_str_list);

my $json = JSON::PP->new;
for my $list ([], ['n1'], [ 'n1', 'n2', 'n3' ], [ 'a"b', 'c' ], [ '","', 'z' ], [ 'a\\b', "c\n" ], [ "tab\t", 'x' ],
    [ '"', '"' ], [ "\x{263a}", 'n' ])
{
    my $text = json_str_list($list);
    is_deeply($json->decode($text), $list, "json_str_list reads back: $text");
}
is(json_str_list([ 'n1', 'n2' ]), '["n1","n2"]', 'plain names: one join');

$ENV{CRS_BRIDGE_JSON} = 'PP';
my $pp = JSON::PP->new->utf8(1)->allow_nonref(1);
my $backend_decodes = 0;
{
    no warnings 'redefine';
    my $decode = \&JSON::PP::decode;
    *JSON::PP::decode = sub { $backend_decodes++; goto &$decode };
}

# decode_answer($line) and JSON::PP's decoding of it (numbers as their kind and bits), and what
# read it ('fast' or 'backend').
sub both_ways {
    my ($line) = @_;
    my $want = bits($pp->decode($line));
    $backend_decodes = 0;
    my $got = bits(decode_answer($line));
    return ($got, $want, $backend_decodes ? 'backend' : 'fast');
}

# decode_answer($line) against JSON::PP; $fast: whether it should do without JSON::PP.
sub same_as_pp {
    my ($line, $fast, $what) = @_;
    my ($got, $want, $path) = both_ways($line);
    is_deeply($got, $want, "$what: as JSON::PP decodes it");
    is($path, $fast ? 'fast' : 'backend', "$what: read by the " . ($fast ? 'fast path' : 'backend'));
}

# A structure with each number replaced by its kind and its bits (is_deeply compares numbers as strings).
sub bits {
    my ($v) = @_;
    return [ map { bits($_) } @$v ] if ref $v eq 'ARRAY';
    return { map { ($_ => bits($v->{$_})) } keys %$v } if ref $v eq 'HASH';
    return $v if !defined $v || ref $v;
    my $number = B::svref_2object(\$v)->FLAGS & (B::SVf_IOK() | B::SVf_NOK());
    return $number ? (B::svref_2object(\$v)->FLAGS & B::SVf_NOK() ? 'NV ' : 'IV ') . unpack('H*', pack('d', $v)) : "PV $v";
}

my @numbers = (qw(0 1 -1 7 123456789012345 -123456789012345 0.0 -0.0 1.5 0.06666504166308601 0.026685448156265
    1e-05 1e+20 2.5E-3 5e-324 1.7976931348623157e+308 2.2250738585072014e-308 0.1 0.30000000000000004 1e22 9007199254740993.0));
srand(17);
push @numbers, map { sprintf('%.17g', (rand() - 0.5) * 10**int(rand(40) - 20)) } 1 .. 200;
push @numbers, map { sprintf('%.15g', rand() * 3) } 1 .. 100;
my $id = 1;
my (@got, @want, @paths, @expected);
for my $n (@numbers) {
    my ($got, $want, $path) = both_ways(qq({"jsonrpc":"2.0","result":$n,"id":) . $id++ . '}');
    push @got, [ $n, $got ];
    push @want, [ $n, $want ];
    push @paths, "$n: $path";
    # An integer part of more than 15 digits is left to JSON::PP (it may keep the number as a string).
    push @expected, "$n: " . ($n =~ /^-?[0-9]{16}/ ? 'backend' : 'fast');
}
is_deeply(\@got, \@want, scalar(@numbers) . ' numbers as results: as JSON::PP decodes them');
is_deeply(\@paths, \@expected, '... read by the fast path, but for integer parts of more than 15 digits');
my $scored = sub {
    my ($sid, $src, $tgt, $imbalance) = @_;
    return qq({"migration":{"sid":"$sid","source-node":"$src","target-node":"$tgt"},"imbalance":$imbalance});
};
my @lists = (
    [ [], 1, 'no scored migration' ],
    [ [ $scored->('vm:119', 'node03', 'node02', '0.026685448156265') ], 1, 'one scored migration' ],
    [ [ map { $scored->("ct:$_", 'a b', "n'$_", $numbers[$_]) } grep { $numbers[$_] !~ /^-?[0-9]{16}/ } 0 .. 60 ],
        1, 'many scored migrations' ],
    [ [ $scored->('vm:1', 'n\\\\1', 'n2', '0.5') ], 0, 'a name with an escape' ],
    [ [ $scored->("vm:\xc3\xbc", 'n1', 'n2', '0.5') ], 0, 'a name past ASCII' ],
    [ [ $scored->('vm:1', 'n1', 'n2', '12345678901234567') ], 0, 'a long integer (JSON::PP: a string)' ],
);
for my $case (@lists) {
    my ($entries, $fast, $what) = @$case;
    same_as_pp('{"jsonrpc":"2.0","result":[' . join(',', @$entries) . '],"id":' . $id++ . '}', $fast, $what);
}
for my $line ('{"jsonrpc":"2.0","result":null,"id":3}', '{"jsonrpc":"2.0","result":{"scheduler":"s1"},"id":4}',
    '{"jsonrpc":"2.0","result":[["n1",0.5],["n2",1.0]],"id":5}', '{"jsonrpc":"2.0","result":1,"id":0}',
    '{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params: limit"},"id":6}',
    '{"jsonrpc":"2.0","result":[{"migration":{"sid":"a","source-node":"b","target-node":"c"},"imbalance":1}{},],"id":7}')
{
    my $valid = eval { $pp->decode($line); 1 };
    if ($valid) {
        same_as_pp($line, 0, "other answer $line");
    } else {
        ok(!eval { decode_answer($line); 1 }, "malformed, refused as JSON::PP refuses it: $line");
    }
}

done_testing();
