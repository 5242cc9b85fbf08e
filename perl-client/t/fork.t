#!/usr/bin/perl
# After a fork the child gets its own server, with the objects it inherited restored there;
# parent and child then work on their own copies, and neither frees the other's state.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use CRSBridgeTest;
use CRSBridge::Connection;
use PVE::RS::ResourceScheduling::Static;

sub service {
    my ($node, $cores) = @_;
    return { stats => { maxcpu => $cores, maxmem => $cores * GiB }, running => 1, 'current-node' => $node };
}

my $usage = PVE::RS::ResourceScheduling::Static->new();
my $dropped_in_child = PVE::RS::ResourceScheduling::Static->new();
for my $u ($usage, $dropped_in_child) {
    $u->add_node($_, 16, 64 * GiB) for qw(a b c);
    $u->add_service('vm:1', service('a', 8));
}
my $parent_server = server_pid();
my $before = $usage->calculate_node_imbalance;
$usage->add_service('vm:2', service('b', 2));    # buffered when the fork happens

pipe(my $reader, my $writer) or die "pipe: $!";
my $child = fork() // die "fork: $!";
if (!$child) {
    close($reader);
    # The child: its own server, the inherited objects restored there (with the buffered add).
    my @report;
    $usage->calculate_node_imbalance;
    push @report, 'own-server' if (server_pid() // $parent_server) != $parent_server;
    my $copy = PVE::RS::ResourceScheduling::Static->new();
    $copy->add_node($_, 16, 64 * GiB) for qw(a b c);
    $copy->add_service('vm:1', service('a', 8));
    $copy->add_service('vm:2', service('b', 2));
    push @report, 'inherited-state' if $usage->calculate_node_imbalance == $copy->calculate_node_imbalance;
    $usage->add_service('vm:3', service('c', 16));    # only in the child
    $usage->remove_node('a');
    push @report, 'child-mutations' if join(',', @{ $usage->list_nodes }) eq 'b,c';
    undef $dropped_in_child;    # frees the child's copy only
    print {$writer} join(' ', @report), "\n";
    close($writer);
    exit 0;
}
close($writer);
my $report = <$reader> // '';
waitpid($child, 0);
is($?, 0, 'child exited cleanly');
like($report, qr/\bown-server\b/, 'the child used its own server');
like($report, qr/\binherited-state\b/, 'the child had the inherited state, buffered mutations included');
like($report, qr/\bchild-mutations\b/, 'the child could change its copy');

is(server_pid(), $parent_server, 'the parent kept its server');
is_deeply($usage->list_nodes, [qw(a b c)], "the child's changes are not in the parent");
my $reference = PVE::RS::ResourceScheduling::Static->new();
$reference->add_node($_, 16, 64 * GiB) for qw(a b c);
$reference->add_service('vm:1', service('a', 8));
$reference->add_service('vm:2', service('b', 2));
is($usage->calculate_node_imbalance, $reference->calculate_node_imbalance, "the parent's own state");
isnt($usage->calculate_node_imbalance, $before, '... including its buffered add');
is(error_of { $dropped_in_child->calculate_node_imbalance }, '', 'an object the child dropped still works here');
is_deeply(server_call($dropped_in_child, 'list_nodes'), [qw(a b c)], '... and is intact on the server');

# A child whose first calls are adds, enough for parts of them to be sent: the journal does not
# look at the process id per entry, the sending does, so they go to the child's own server.
my $imbalance = $usage->calculate_node_imbalance;
my $adds = 3 * CRSBridge::Batching::CHUNK;
pipe($reader, $writer) or die "pipe: $!";
$child = fork() // die "fork: $!";
if (!$child) {
    close($reader);
    $usage->add_service("vm:child$_", service('c', 0.5)) for 1 .. $adds;
    my $copy = PVE::RS::ResourceScheduling::Static->new();
    $copy->add_node($_, 16, 64 * GiB) for qw(a b c);
    $copy->add_service('vm:1', service('a', 8));
    $copy->add_service('vm:2', service('b', 2));
    $copy->add_service("vm:child$_", service('c', 0.5)) for 1 .. $adds;
    my $same = $usage->calculate_node_imbalance == $copy->calculate_node_imbalance;
    my $own = (server_pid() // $parent_server) != $parent_server;
    print {$writer} ($same ? 'same ' : '') . ($own ? 'own-server' : ''), "\n";
    close($writer);
    exit 0;
}
close($writer);
$report = <$reader> // '';
waitpid($child, 0);
is($?, 0, 'a child that only added: exited cleanly');
like($report, qr/\bsame\b/, '... its adds reached its own state');
like($report, qr/\bown-server\b/, '... on its own server');
is(server_pid(), $parent_server, 'the parent kept its server');
is($usage->calculate_node_imbalance, $imbalance, "... and its state: none of the child's adds reached it");
is(error_of { $usage->add_service('vm:child1', service('c', 0.5)) }, '', '... nor its mirror');

done_testing();
