package HASim;

# A small model of what pve-ha-manager 5.2's CRM does with the scheduler every round
# (ha-manager.md 7.1-7.4): rebuild the node usage from scratch (one add_node per node, one
# add_service/add_resource per guest, through the same wrapper logic as PVE::HA::Usage::*),
# then load_balance: imbalance threshold, hold duration, candidate bundles, best migration
# (bruteforce or TOPSIS, limit 1), margin, at most one move per round and none while a
# migration runs. A migration takes one round; the simulated LRM then finishes it.
#
# The cluster it simulates: nodes with capacities (and, for the dynamic scheduler, a base load
# of cores and bytes), guests with limits and measured usage; the measured usage of a node is
# its base load plus its running guests, as PVE::HA::Sim::Hardware computes it.

use strict;
use warnings;

use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;

=head1 METHODS

=over

=item new(%options)

C<mode> (static|dynamic), C<nodes> (name -> {maxcpu, maxmem, cpu, mem}), C<services> (sid ->
{node, state (started|stopped|migrate), running (LRM confirmed), maxcpu, maxmem, cpu, mem}),
C<threshold> (default 0.3), C<hold_duration> (3), C<margin> (0.1), C<method>
(bruteforce|topsis).

=cut

sub new {
    my ($class, %opt) = @_;
    return bless {
        threshold => 0.3, hold_duration => 3, margin => 0.1, method => 'bruteforce',
        %opt, counter => 0, log => [], round => 0,
    }, $class;
}

sub services { return $_[0]{services} }
sub log_lines { return $_[0]{log} }

=item round()

One CRM round. Returns C<{ round, imbalance, counter, move => {sid, from, to, expected} or
undef, skipped => reason or undef, gate => the gate that decided, relative => the best move's
relative gain (when scored) }>. C<gate> is C<motion> (a migration queued or running: no
balancing), C<threshold>, C<hold>, C<no-candidates>, C<margin> (the gate that stopped the round)
or C<moved>. A migration queued in round N is running in round N + 1 and done from round N + 2 on.

=cut

sub round {
    my ($self) = @_;
    my $report = { round => ++$self->{round} };
    $self->{relative} = undef;
    my $usage = $self->recompute_online_node_usage;
    $report->{imbalance} = $self->_imbalance($usage);
    if (grep { $_->{state} eq 'migrate' } values %{ $self->{services} }) {
        $report->{skipped} = 'migration running';
        $self->{gate} = 'motion';
    } else {
        $report->{move} = $self->load_balance($usage, $report->{imbalance});
    }
    $report->{counter} = $self->{counter};
    @$report{qw(gate relative)} = @$self{qw(gate relative)};
    $self->_lrm_finishes_migrations;
    return $report;
}

=item recompute_online_node_usage()

A new usage object holding every node and guest (sorted by name, as the HA manager adds them).

=cut

sub recompute_online_node_usage {
    my ($self) = @_;
    my $static = $self->{mode} eq 'static';
    my $usage = $static ? PVE::RS::ResourceScheduling::Static->new() : PVE::RS::ResourceScheduling::Dynamic->new();
    my $measured = $static ? {} : $self->measured_node_usage;
    for my $name (sort keys %{ $self->{nodes} }) {
        my $node = $self->{nodes}{$name};
        eval {
            if ($static) {
                $usage->add_node($name, int($node->{maxcpu}), int($node->{maxmem}));
            } else {
                $usage->add_node($name, { %{ $measured->{$name} }, maxcpu => $node->{maxcpu}, maxmem => $node->{maxmem} });
            }
            1;
        } or die "initializing $self->{mode} node usage for '$name' failed - $@";
    }
    for my $sid (sort keys %{ $self->{services} }) {
        my ($current, $target, $running) = $self->used_service_nodes($self->{services}{$sid});
        $self->add_service_usage($usage, $sid, $current, $target, $running);
    }
    return $usage;
}

=item used_service_nodes($service)

(current, target, running) as PVE::HA::Usage::get_used_service_nodes derives them.

=cut

sub used_service_nodes {
    my ($self, $sd) = @_;
    my $state = $sd->{state};
    return (undef, undef, 0) if $state eq 'stopped' || $state eq 'request_start';
    my $current = $sd->{node};
    my $target = $state eq 'migrate' ? $sd->{target} : undef;
    my $running = ($state eq 'started' && $sd->{running}) || ($state ne 'started' && defined $current) ? 1 : 0;
    return ($current, $target, $running);
}

sub add_service_usage {
    my ($self, $usage, $sid, $current, $target, $running) = @_;
    return if !defined $current && !defined $target;
    ($current, $target) = ($target, undef) if !defined $current;
    my $sd = $self->{services}{$sid};
    my $stats = $self->{mode} eq 'static'
        ? { maxcpu => $sd->{maxcpu}, maxmem => $sd->{maxmem} }
        : { cpu => $sd->{cpu}, maxcpu => $sd->{maxcpu}, mem => $sd->{mem}, maxmem => $sd->{maxmem} };
    my $method = $self->{mode} eq 'static' ? 'add_service' : 'add_resource';
    eval {
        $usage->$method($sid, { stats => $stats, running => $running, 'current-node' => $current,
            'target-node' => $target });
        1;
    } or push @{ $self->{log} }, "unable to add service '$sid' - $@";
    return;
}

=item measured_node_usage()

name -> {cpu, mem}: base load plus the guests running there (a migrating guest still runs on
its source node).

=cut

sub measured_node_usage {
    my ($self) = @_;
    my %usage = map { $_ => { cpu => $self->{nodes}{$_}{cpu} // 0, mem => $self->{nodes}{$_}{mem} // 0 } }
        keys %{ $self->{nodes} };
    # In sid order, as the sums' last bits depend on it: a round is the same on the same state.
    for my $sd (map { $self->{services}{$_} } sort keys %{ $self->{services} }) {
        next if $sd->{state} eq 'stopped' || !$sd->{running};
        $usage{ $sd->{node} }{cpu} += $sd->{cpu};
        $usage{ $sd->{node} }{mem} += $sd->{mem};
    }
    return \%usage;
}

sub _imbalance {
    my ($self, $usage) = @_;
    my $imbalance = eval { $usage->calculate_node_imbalance };
    push @{ $self->{log} }, "unable to calculate node imbalance - $@" if !defined $imbalance;
    return $imbalance // 0.0;
}

=item load_balance($usage, $imbalance)

Manager::load_balance: returns the move it queued ({sid, from, to, expected}) or undef.

=cut

sub load_balance {
    my ($self, $usage, $imbalance) = @_;
    if ($imbalance <= $self->{threshold}) {
        @$self{qw(counter gate)} = (0, 'threshold');
        return undef;
    }
    $self->{gate} = 'hold';
    return undef if ++$self->{counter} < $self->{hold_duration};
    $self->{counter} = 0;
    $self->{gate} = 'no-candidates';
    my $candidates = $self->migration_candidates;
    my $scorer = $self->{method} eq 'topsis'
        ? 'score_best_balancing_migration_candidates_topsis'
        : 'score_best_balancing_migration_candidates';
    my $best = eval { $usage->$scorer($candidates, 1)->[0] };
    push @{ $self->{log} }, "unable to score best balancing migration - $@" if $@;
    return undef if !$best;
    my $relative = $self->{relative} = ($imbalance - $best->{imbalance}) / $imbalance;
    $self->{gate} = 'margin';
    return undef if $relative < $self->{margin};
    $self->{gate} = 'moved';
    my $migration = $best->{migration};
    my $sd = $self->{services}{ $migration->{sid} };
    @$sd{qw(state target queued)} = ('migrate', $migration->{'target-node'}, $self->{round});
    push @{ $self->{log} }, sprintf('auto rebalance - migrate %s to %s (expected change for imbalance from %.2f to %.2f)',
        $migration->{sid}, $migration->{'target-node'}, $imbalance, $best->{imbalance});
    return { sid => $migration->{sid}, from => $migration->{'source-node'}, to => $migration->{'target-node'},
        expected => $best->{imbalance} };
}

=item migration_candidates()

One bundle per started guest (no affinity rules here), allowed on every other node.

=cut

sub migration_candidates {
    my ($self) = @_;
    my @nodes = sort keys %{ $self->{nodes} };
    my @candidates;
    for my $sid (sort keys %{ $self->{services} }) {
        my $sd = $self->{services}{$sid};
        next if $sd->{state} ne 'started';
        push @candidates, { leader => $sid, resources => [$sid], nodes => [ grep { $_ ne $sd->{node} } @nodes ] };
    }
    return \@candidates;
}

# Migrations queued in an earlier round are done by the end of this one.
sub _lrm_finishes_migrations {
    my ($self) = @_;
    for my $sd (values %{ $self->{services} }) {
        next if $sd->{state} ne 'migrate' || $sd->{queued} == $self->{round};
        @$sd{qw(node state)} = (delete $sd->{target}, 'started');
        delete $sd->{queued};
    }
    return;
}

=back

=cut

1;
