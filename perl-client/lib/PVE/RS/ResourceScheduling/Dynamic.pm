package PVE::RS::ResourceScheduling::Dynamic;

use strict;
use warnings;

use parent 'CRSBridge::Scheduler';

use CRSBridge::Args qw(check_arity arg_string arg_str);
use CRSBridge::Records qw(node_stats_param dynamic_stats_param);

use constant BINDING => __PACKAGE__;
use constant MODE => 'dynamic';

=head1 NAME

PVE::RS::ResourceScheduling::Dynamic - crs-bridge drop-in for libpve-rs-perl's dynamic scheduler

=head1 SYNOPSIS

    use PVE::RS::ResourceScheduling::Dynamic;

    my $usage = PVE::RS::ResourceScheduling::Dynamic->new();
    $usage->add_node('node1', { cpu => 1.7, maxcpu => 16, mem => 12 * 2**30, maxmem => 64 * 2**30 });
    $usage->add_resource('vm:101', {
        stats => { cpu => 0.7, maxcpu => 4.0, mem => 8 * 2**30, maxmem => 16 * 2**30 },
        running => 1, 'current-node' => 'node1',
    });
    my $imbalance = $usage->calculate_node_imbalance();

=head1 DESCRIPTION

Same package name, methods, arguments, return shapes and error messages as
C<PVE::RS::ResourceScheduling::Dynamic> of libpve-rs-perl 0.13.0, computed by the shared
crs-bridge server (see L<PVE::RS::ResourceScheduling::Static> for the common notes).

Dynamic mode works on measured usage: node stats carry the cores and bytes in use, which the
imbalance and the migration scoring use as they are; resources matter for migration what-ifs
(their C<cpu> and C<mem> move) and for start scoring, where resources not yet running
(C<running> false) count at their limits.

=head1 METHODS

=over

=item new()

A new, empty usage. Dies when the server cannot be started, saying why.

=cut

sub new {
    check_arity('new', \@_, 'class');
    my $class = shift;
    return $class->_new(@_);
}

=item add_node($nodename, \%stats)

C<\%stats> = C<{ cpu => cores in use, maxcpu => cores (integer > 0), mem => bytes in use,
maxmem => bytes (> 0) }>. Dies with C<node '<name>' already exists>. Returns nothing.

=cut

sub add_node {
    check_arity('add_node', \@_, qw(this nodename stats)) if @_ != 3;
    my $st = CRSBridge::Scheduler::_state($_[0]);
    my $name = arg_string($_[1]);
    my ($json, $refused, $mem) = node_stats_param($_[2], 'stats');
    CRSBridge::Scheduler::_add_node($st, $name, $json, $refused, $mem);
    return;
}

=item add_resource($sid, \%resource)

C<\%resource> = C<{ stats => { cpu, maxcpu, mem, maxmem }, running => $bool, 'current-node'
=> $node, 'target-node' => $node_or_undef }>. Errors as C<add_service> of the static
scheduler. Returns nothing.

=cut

# Shared with the static scheduler (CRSBridge::Scheduler).
*add_resource = CRSBridge::Scheduler::_resource_adder(MODE, 'add_resource', 'resource');

=item remove_resource($sid)

Removes a resource from its node(s); an unknown sid is a no-op. Returns nothing.

=cut

sub remove_resource {
    check_arity('remove_resource', \@_, qw(this sid)) if @_ != 2;
    my $st = CRSBridge::Scheduler::_state($_[0]);
    my $sid = arg_str($_[1]);
    CRSBridge::Scheduler::_remove_resource($st, 'remove_resource', $sid);
    return;
}

=item score_nodes_to_start_resource(\%resource_stats)

Array reference of C<[ $nodename, $score ]> for every node (in node order), score in [0, 1],
higher is better, for starting a resource with C<{ cpu, maxcpu, mem, maxmem }> there.

=cut

sub score_nodes_to_start_resource {
    check_arity('score_nodes_to_start_resource', \@_, qw(this resource_stats));
    my $st = CRSBridge::Scheduler::_state($_[0]);
    my ($json) = dynamic_stats_param($_[1], 'resource_stats');
    return CRSBridge::Scheduler::_query($st, 'score_nodes_to_start_resource', '"resource_stats":' . $json);
}

=back

Also the common and extra methods of L<CRSBridge::Scheduler>, and the planning extras
C<plan_rebalance> and C<explain_migrations> of L<CRSBridge::Planning>.

=head1 CONFIGURATION

As L<PVE::RS::ResourceScheduling::Static>.

=cut

1;
