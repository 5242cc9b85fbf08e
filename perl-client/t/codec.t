#!/usr/bin/perl
# CRSBridge::Codec's JSON writers read back as what they were given (the fast path of string
# lists included: names with quotes, backslashes, control characters, separators' look-alikes).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use JSON::PP;
use Test::More;
use CRSBridge::Codec qw(json_str_list);

my $json = JSON::PP->new;
for my $list ([], ['n1'], [ 'n1', 'n2', 'n3' ], [ 'a"b', 'c' ], [ '","', 'z' ], [ 'a\\b', "c\n" ], [ "tab\t", 'x' ],
    [ '"', '"' ], [ "\x{263a}", 'n' ])
{
    my $text = json_str_list($list);
    is_deeply($json->decode($text), $list, "json_str_list reads back: $text");
}
is(json_str_list([ 'n1', 'n2' ]), '["n1","n2"]', 'plain names: one join');

done_testing();
