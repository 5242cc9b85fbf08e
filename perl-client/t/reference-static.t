#!/usr/bin/perl
# The scenarios of upstream's own Static binding test (reference-figures.md section 8.2),
# written anew for the drop-in: placing services one by one on the best node, removal, an
# overcommitted cluster, and nodes with a small memory difference.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use CRSBridgeTest;
use PVE::RS::ResourceScheduling::Static;

sub usage_with {
    my (@nodes) = @_;
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node(@$_) for @nodes;
    return $usage;
}

sub order {
    my ($usage, $stats) = @_;
    return ranked($usage->score_nodes_to_start_service($stats));
}

my @ABC = ([ 'A', 10, 100e9 ], [ 'B', 20, 200e9 ], [ 'C', 30, 300e9 ]);
my $SERVICE = { maxcpu => 4, maxmem => 20e9 };

subtest 'test_balance' => sub {
    my $usage = usage_with(@ABC[0, 1]);
    for my $i (0 .. 14) {
        my $best = order($usage, $SERVICE)->[0];
        is($best, $i % 3 == 2 ? 'A' : 'B', "round $i");
        $usage->add_service_usage_to_node($best, "vm:" . (100 + $i), $SERVICE);
    }
};

subtest 'test_balance_removal' => sub {
    my $usage = usage_with(@ABC);
    $usage->add_service_usage_to_node('A', 'a', $SERVICE);
    $usage->add_service_usage_to_node('A', 'b', $SERVICE);
    $usage->add_service_usage_to_node('B', 'c', $SERVICE);
    $usage->add_service_usage_to_node('B', 'd', $SERVICE);
    $usage->add_service_usage_to_node('C', 'c', $SERVICE);    # c now moves from B to C
    is_deeply(order($usage, $SERVICE), [qw(C B A)], 'with c moving B -> C');
    $usage->remove_service_usage('d');
    $usage->remove_service_usage('c');
    $usage->add_service_usage_to_node('C', 'c', $SERVICE);
    is_deeply(order($usage, $SERVICE), [qw(B C A)], 'after removing d and c, c on C');
    $usage->remove_node('B');
    is_deeply(order($usage, $SERVICE), [qw(C A)], 'after removing node B');
};

subtest 'test_overcommitted' => sub {
    my $usage = usage_with([ 'A', 4, 4102062080 ], [ 'B', 4, 4102062080 ], [ 'C', 4, 4102053888 ],
        [ 'D', 4, 4102053888 ]);
    my $service = { maxcpu => 1, maxmem => 512 * MiB };
    $usage->add_service_usage_to_node('A', $_, $service) for qw(a b c e);
    $usage->add_service_usage_to_node('B', 'd', $service);
    is_deeply(order($usage, $service), [qw(C D B A)], 'emptiest first, ties by name');
};

subtest 'test_balance_small_memory_difference' => sub {
    my %expected = (0 => [qw(A B C)], 1 => [qw(A B C)], 2 => [qw(B C A)], 3 => [qw(C A B)]);
    my $service = { maxcpu => 3, maxmem => 16e6 };
    for my $initial (0, 1) {
        my $usage = usage_with([ 'A', 8, 10e9 ], [ 'B', 4, 9e9 ], [ 'C', 4, 8e9 ]);
        if ($initial) {
            $usage->add_service_usage_to_node('A', 'vm:initial-a', { maxcpu => 4, maxmem => 1e9 });
            $usage->add_service_usage_to_node('B', 'vm:initial-b', { maxcpu => 2, maxmem => 1e9 });
            $usage->add_service_usage_to_node('C', 'vm:initial-c', { maxcpu => 2, maxmem => 1e9 });
        }
        for my $i (0 .. 19) {
            my $order = order($usage, $service);
            is_deeply($order, $expected{ $i % 4 }, ($initial ? 'with' : 'without') . " initial load, round $i");
            $usage->add_service_usage_to_node($order->[0], "vm:$i", $service);
        }
    }
};

done_testing();
