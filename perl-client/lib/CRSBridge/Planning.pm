package CRSBridge::Planning;

# crs-bridge's planning extras on the scheduler objects (not in upstream's binding): a dry run
# of the HA manager's rebalancing and an explanation of one balancing decision. Both only read
# the object's state on the server; options are checked for type here and for range by the
# server, whose message names the field. The methods are CRSBridge::Scheduler's (they check
# the arguments' count and the invocant, and ask the server); this module renders their params
# and reads their answers.

use strict;
use warnings;

use CRSBridge::Codec qw(json_str json_num);
use CRSBridge::Records qw(candidates_param);
use Scalar::Util qw(looks_like_number);

=head1 NAME

CRSBridge::Planning - plan_rebalance and explain_migrations for the crs-bridge scheduler objects

=head1 EXTRA METHODS (crs-bridge only, not in upstream's binding)

Methods of L<PVE::RS::ResourceScheduling::Static> and C<::Dynamic> (in
L<CRSBridge::Scheduler>); this module holds their options and what they return, and the
functions C<plan_params(\@candidates, \%opts)>, C<plan_answer($plan)> and
C<explain_params(\@candidates, \%opts)> (the request's params as JSON members, dying for a
bad option; the answer as returned). Both take the compact candidates of
C<score_best_balancing_migration_candidates> and a hash reference of options (optional; an unknown option dies naming the known ones). Fractions are
fractions, not percentages (0.3 = 30 %). Out-of-range values (a negative threshold, an unknown
method) die with the server's message naming the option. Neither method changes the object.

=over

=item plan_rebalance(\@candidates, \%opts)

What the HA manager's auto-rebalancing would do round after round: each step scores the
candidates on the planned state as one HA round does (limit 1), checks the threshold and the
margin, and applies the move, until a round would stop. Options:

=over

=item method

C<bruteforce> (default) or C<topsis>.

=item threshold

Stop when the imbalance is at or under this fraction (default 0.3).

=item margin

Stop when the best move lowers the imbalance by less than this fraction of it (relative,
default 0.1).

=item max_steps

Plan at most this many moves (default 10); C<undef> for no limit (every move strictly lowers
the imbalance, so the plan still ends).

=item allow_repeat

True to let a bundle that already moved move again (never back to where it is); default false.

=back

An undef C<method>, C<threshold>, C<margin> or C<allow_repeat> counts as not given. Returns a
hash reference: C<method>, C<imbalance-formula> (the object's), C<threshold>, C<margin>,
C<max-steps> (undef: no limit), C<allow-repeat> (1 or 0), C<steps> (array of C<{ sid,
'source-node', 'target-node', resources => [sids of the bundle], 'expected-imbalance' (the
scorer's truncated value, as C<select_best_balancing_migration> returns it),
'imbalance-before', 'imbalance-after' }>), C<stop-reason> (C<threshold-reached>,
C<no-candidates>, C<no-improvement>, C<margin-not-reached> or C<max-steps>), C<stop-message>
(a sentence), and C<before>/C<after>: C<{ imbalance, nodes => [ { node, 'cpu-load',
'mem-load', load } in node order ] }> (loads as fractions of the node's capacity).

=cut

my %PLAN_OPTIONS = (
    method => \&_string, threshold => \&_number, margin => \&_number,
    max_steps => \&_number_or_null, allow_repeat => \&_boolean,
);

sub plan_params {
    my ($candidates, $opts) = @_;
    return '"candidates":' . candidates_param($candidates) . _options('plan_rebalance', $opts, \%PLAN_OPTIONS);
}

# The server's plan as plan_rebalance returns it.
sub plan_answer {
    my ($plan) = @_;
    $plan->{'allow-repeat'} = $plan->{'allow-repeat'} ? 1 : 0;
    return $plan;
}

=item explain_migrations(\@candidates, \%opts)

Why C<score_best_balancing_migration_candidates> (or its TOPSIS variant) chooses what it does,
or why one HA round would not move anything. Options: C<limit> (explain this many choices,
default 1, as one HA round), C<method> (C<bruteforce> or C<topsis>), C<threshold> and
C<margin> (the HA manager's checks, as for C<plan_rebalance>; not given or undef: not
checked). Returns a hash reference: C<method>, C<imbalance-formula>, C<limit>, C<threshold>,
C<margin>, C<current> (as C<before> of C<plan_rebalance>), C<candidate-count>, C<chosen> (what
the scorer returns, best first: C<{ 'candidate-index', migration => { sid, 'source-node',
'target-node' }, imbalance, source => { node, before, after }, target => { ... }, topsis }>,
loads as C<{ 'cpu-load', 'mem-load', load }>), C<runner-up> (the next one, or undef),
C<best-imbalance>, C<relative-improvement>, C<reason> (C<migrate> or a C<stop-reason> of
C<plan_rebalance> but C<max-steps>), C<message>, and for TOPSIS C<topsis> (criteria, weights,
ideal best and worst).

=cut

my %EXPLAIN_OPTIONS = (
    limit => \&_number, method => \&_string, threshold => \&_number_or_null, margin => \&_number_or_null,
);

sub explain_params {
    my ($candidates, $opts) = @_;
    return '"candidates":' . candidates_param($candidates) . _options('explain_migrations', $opts, \%EXPLAIN_OPTIONS);
}

=back

=cut

# The given options as JSON object members (each with a leading comma).
sub _options {
    my ($method, $opts, $known) = @_;
    return '' if !defined $opts;
    die "crs-bridge: $method: the options must be a hash reference, got '$opts'\n" if ref $opts ne 'HASH';
    my $json = '';
    for my $name (sort keys %$opts) {
        my $render = $known->{$name}
            or die "crs-bridge: $method: unknown option '$name' (known: " . join(', ', sort keys %$known) . ")\n";
        my $value = $render->($method, $name, $opts->{$name});
        $json .= ',"' . $name . '":' . $value if defined $value;
    }
    return $json;
}

sub _string {
    my ($method, $name, $value) = @_;
    return undef if !defined $value;
    die "crs-bridge: $method: option '$name' must be a string, got '$value'\n" if ref $value;
    return json_str($value);
}

sub _number {
    my ($method, $name, $value) = @_;
    return undef if !defined $value;
    die "crs-bridge: $method: option '$name' must be a finite number, got '$value'\n"
        if ref $value || !looks_like_number($value) || $value != $value || $value * 0 != 0;
    return json_num($value);
}

sub _number_or_null {
    return defined $_[2] ? _number(@_) : 'null';
}

sub _boolean {
    my ($method, $name, $value) = @_;
    return undef if !defined $value;
    return $value ? 'true' : 'false';
}

1;
