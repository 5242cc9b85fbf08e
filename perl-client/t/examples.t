#!/usr/bin/perl
# perl-client/examples/rebalance.pl on the repository's example clusters: the moves it prints
# are the ones the server's stateless headline method finds for the same snapshot.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use JSON::PP;
use Test::More;
use CRSBridgeTest;
use CRSBridge::Connection;

my $root = "$FindBin::Bin/../..";
my @clusters = grep { -f } map { "$root/examples/$_-cluster.json" } qw(dynamic static);
plan skip_all => 'no example clusters' if !@clusters;

for my $path (@clusters) {
    open(my $fh, '<', $path) or die "$path: $!";
    my $text = do { local $/; <$fh> };
    my $cluster = JSON::PP->new->decode($text);
    my $params = JSON::PP->new->canonical->encode({ usage => $cluster->{usage}, candidates => $cluster->{candidates},
        limit => 3 });
    my $expected = CRSBridge::Connection->instance->call(undef, 'score_best_balancing_migrations', $params);
    open(my $out, '-|', $^X, "$root/perl-client/examples/rebalance.pl", '--limit', 3, $path) or die "rebalance.pl: $!";
    my @moves = map { /migrate (\S+)\s+(\S+) -> (\S+): imbalance \S+ -> (\S+)/ ? [ $1, $2, $3, $4 ] : () } <$out>;
    close($out);
    is($?, 0, "$path: rebalance.pl ran");
    is_deeply(\@moves, [ map { [ @{ $_->{migration} }{qw(sid source-node target-node)}, sprintf('%.4f', $_->{imbalance}) ] } @$expected ],
        "$path: the moves of the stateless method");
}

done_testing();
