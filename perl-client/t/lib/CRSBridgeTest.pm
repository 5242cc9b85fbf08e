package CRSBridgeTest;

# Shared helpers of the Perl client's tests: find the server, small constants, an independent
# imbalance computation, and the ranking helper of upstream's own binding test.

use strict;
use warnings;

use Exporter 'import';
use File::Spec;
use FindBin;
use List::Util qw(sum);

our @EXPORT = qw(MiB GiB error_of ranked reference_imbalance server_call server_pid);

use constant MiB => 1024**2;
use constant GiB => 1024**3;

BEGIN {
    # A config file of the machine's (an installed package's) must not change what is tested.
    $ENV{CRS_BRIDGE_CONFIG} //= File::Spec->devnull;
    # `make prove` puts .venv/bin on PATH; running prove by hand from the repo works too.
    if (!$ENV{CRS_BRIDGE_COMMAND} && !grep { -x File::Spec->catfile($_, 'crs-bridge') } File::Spec->path) {
        my $venv = File::Spec->rel2abs("$FindBin::Bin/../../.venv/bin/crs-bridge");
        $ENV{CRS_BRIDGE_COMMAND} = "$venv serve" if -x $venv;
    }
}

=head1 FUNCTIONS

=over

=item error_of { code }

The exception C<code> throws ('' when it does not die).

=cut

sub error_of(&) {
    my ($code) = @_;
    return eval { $code->(); 1 } ? '' : $@;
}

=item ranked(\@scores)

Node names of C<[[name, score], ...]> best first: by negated score, then name (as upstream's
binding test and the HA manager order them).

=cut

sub ranked {
    my ($scores) = @_;
    return [ map { $_->[0] } sort { -$a->[1] <=> -$b->[1] || $a->[0] cmp $b->[0] } @$scores ];
}

=item reference_imbalance(\@nodes, $formula)

Imbalance computed here from first principles (not by the code under test): C<\@nodes> =
C<[[cpu, maxcpu, mem, maxmem], ...]>; load = mean of cpu and memory load; coefficient of
variation (population standard deviation / mean), divided by sqrt(n - 1) for 'normalized'.

=cut

sub reference_imbalance {
    my ($nodes, $formula) = @_;
    my @loads = map { ($_->[0] / $_->[1] + $_->[2] / $_->[3]) / 2 } @$nodes;
    my $n = @loads;
    return 0 if $n < 2 && $formula eq 'normalized';
    my $total = sum(0, @loads);
    return 0 if $total == 0;
    my $mean = $total / $n;
    my $cv = sqrt(sum(map { ($_ - $mean)**2 } @loads) / $n) / $mean;
    return $formula eq 'normalized' ? $cv / sqrt($n - 1) : $cv;
}

=item server_call($object, $method, $params_json)

Calls C<scheduler.$method> for C<$object> on the server directly (after the buffered
mutations), to check the server's state against what the client answers locally.

=cut

sub server_call {
    my ($object, $method, $params) = @_;
    my $st = CRSBridge::Scheduler::_state($object);
    return CRSBridge::Connection->instance->call($st->{remote}, "scheduler.$method", $params // '');
}

=item server_pid()

Process id of this process's crs-bridge server (undef when none runs).

=cut

sub server_pid {
    return CRSBridge::Connection->instance->server_pid;
}

=back

=cut

1;
