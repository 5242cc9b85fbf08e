package CRSBridge::Scheduler;

# The methods PVE::RS::ResourceScheduling::Static and ::Dynamic share, and their object
# life cycle. A subclass provides BINDING (its package name, for error texts) and MODE.

use strict;
use warnings;

use CRSBridge::Args qw(check_arity check_invocant arg_str arg_usize arg_f64 check_finite);
use CRSBridge::Codec qw(json_str json_int json_num json_str_list);
use CRSBridge::Config;
use CRSBridge::Connection;
use CRSBridge::Mirror;
use CRSBridge::Planning;
use CRSBridge::Records qw(candidates_param candidates_list plain_resource resource_args);
use CRSBridge::Recorder;
use Scalar::Util ();

BEGIN {
    warnings->unimport('experimental::builtin') if $] >= 5.036;
    # builtin::reftype compiles to an op, no sub call (perl >= 5.36); the same answers.
    *_reftype = defined &builtin::reftype ? \&builtin::reftype : \&Scalar::Util::reftype;
}

=head1 NAME

CRSBridge::Scheduler - common base of the crs-bridge drop-ins for PVE::RS::ResourceScheduling::*

=head1 DESCRIPTION

See L<PVE::RS::ResourceScheduling::Static> and L<PVE::RS::ResourceScheduling::Dynamic> for
the methods; this module holds the ones both have.

=head1 SETTINGS

New objects use the imbalance formula of the C<imbalance> setting (L<CRSBridge::Config>):
C<raw> by default, as the binding this replaces.

=cut

# A new object of $class (the mode's new has checked its arity): its mirror (checks and
# journal, CRSBridge::Mirror) and its remote (the server's side, CRSBridge::Remote).
sub _new {
    my ($class) = @_;
    my $formula = CRSBridge::Config::get('imbalance');
    my $mirror = CRSBridge::Mirror->new;
    my $remote = CRSBridge::Connection->instance->create($class->MODE, $formula, $mirror);
    my $st = { mode => $class->MODE, imbalance => $formula, mirror => $mirror, remote => $remote };
    CRSBridge::Recorder::start($st);
    return bless { _crs => $st }, $class;
}

# The state of a checked invocant (dies like perlmod for anything else).
sub _state {
    my $st = ref $_[0] && _reftype($_[0]) eq 'HASH' && $_[0]{_crs};
    return $st if $st;
    check_invocant($_[0], _binding($_[0]));
    return $_[0]{_crs};
}

sub _binding {
    my ($self) = @_;
    return eval { $self->BINDING } // 'PVE::RS::ResourceScheduling';
}

# Journal a mutation: $method with $args, its arguments as JSON in the binding's order (array
# elements without brackets). The mirror method $op (with @args) checks it, dying with
# upstream's message, and records it with its journal entry; the connection sends it later.
# When the server may refuse a value ($refused, or the mirror's memory risk), the mutation is
# sent at once instead, so that the server's message (naming the field) is what the caller sees
# (unless upstream fails anyway: the mirror checks first), and the mirror records it only if the
# server accepted it. $refused may be the client's own refusal, a message (a value JSON cannot
# carry, see CRSBridge::Records): raised once the mirror found no upstream error.
sub _mutate {
    my ($st, $method, $args, $refused, $op, @args) = @_;
    my ($mirror, $remote) = @$st{qw(mirror remote)};
    $remote->check_usable;
    my $entry = '["' . $method . '",' . $args . ']';
    if (!$refused) {
        return CRSBridge::Connection::journaled() if $mirror->$op(@args, $entry);
    } else {
        $mirror->check($op, @args);
        die $refused if $refused =~ /\n\z/;
    }
    CRSBridge::Connection->instance->call_mutation($remote, $method, $args, sub { $mirror->$op(@args, $entry, 1) });
    return;
}

# The method add_service ($mode 'static', $method 'add_service', $param 'service') or
# add_resource ('dynamic', 'add_resource', 'resource'): ($self, $sid, \%resource), the caller's
# scalars (the decoders judge them as perlmod does). The common shape's reader is made here,
# once per mode.
sub _resource_adder {
    my ($mode, $method, $param) = @_;
    my $plain = plain_resource($mode, $method);
    return sub {
        check_arity($method, \@_, 'this', 'sid', $param) if @_ != 3;
        my $st = ref $_[0] && _reftype($_[0]) eq 'HASH' && $_[0]{_crs} || _state($_[0]);    # (_state, without its call)
        # The common case, one per guest and round: the common shape (which decodes without
        # error and the server takes), a usable object, an add the mirror records (or dies for,
        # with upstream's message); else _mutate, which dies saying why or sends it as a call.
        return CRSBridge::Connection::journaled()
            if CRSBridge::Remote::usable($st->{remote}) && $plain->($_[1], $_[2], $st->{mirror});
        my ($args, $refused, @add) = resource_args($_[1], $_[2], $mode, $param);
        _mutate($st, $method, $args, $refused, add_resource => @add);
        return;
    };
}

# add_node of either mode, its arguments decoded ($stats: the JSON after the name, as the
# mode's add_node renders it; $refused as for _mutate; $mem: the node's memory in use, bytes, or
# undef).
sub _add_node {
    my ($st, $name, $stats, $refused, $mem) = @_;
    _mutate($st, 'add_node', json_str($name) . ',' . $stats, $refused || $name eq '', add_node => $name, $mem);
    return;
}

# A remove of either mode (remove_service_usage / remove_resource): unknown sids are a no-op
# upstream, so only known ones are journaled.
sub _remove_resource {
    my ($st, $method, $sid) = @_;
    $st->{remote}->check_usable;
    _mutate($st, $method, json_str($sid), 0, remove_resource => $sid) if $st->{mirror}->has_resource($sid);
    return;
}

sub _query {
    my ($st, $method, @params) = @_;
    return _server_query($st, "scheduler.$method", @params);
}

# A query of the server ($method: its full name; $params: members without braces), answered
# from memory when it repeats one (Connection::query), recorded when the flight recorder is on.
# A balancing query gives its $candidates (JSON) apart, $params then holding the other members,
# each after a comma: the recorder keeps them apart (the decision's candidates are its file's).
sub _server_query {
    my ($st, $method, $params, $candidates) = @_;
    my $sent = defined $candidates ? '"candidates":' . $candidates . $params : $params;
    my ($conn, $remote) = (CRSBridge::Connection->instance, $st->{remote});
    return $conn->query($remote, $method, $sent) if !$st->{rec};
    return CRSBridge::Recorder::query($st, $method, $params, sub { $conn->query($remote, $method, $sent) },
        defined $candidates ? [$candidates] : undef);
}

=head1 COMMON METHODS

=over

=item remove_node($nodename)

Removes a node; its stationary resources go with it, a resource moving from or to it stays on
its other node. An unknown name is a no-op. Returns nothing.

=cut

sub remove_node {
    check_arity('remove_node', \@_, qw(this nodename));
    my $st = _state($_[0]);
    my $name = arg_str($_[1]);
    $st->{remote}->check_usable;
    return if !$st->{mirror}->has_node($name);
    _mutate($st, 'remove_node', json_str($name), 0, remove_node => $name);
    return;
}

=item list_nodes()

Array reference of the node names (in the order they were added; upstream's order is
unspecified).

=cut

sub list_nodes {
    check_arity('list_nodes', \@_, qw(this));
    my $st = _state($_[0]);
    $st->{remote}->check_usable;
    my $names = $st->{mirror}->node_names;
    CRSBridge::Recorder::answered_locally($st, 'scheduler.list_nodes', '', json_str_list($names)) if $st->{rec};
    return $names;
}

=item contains_node($nodename)

1 if the node exists, else 0.

=cut

sub contains_node {
    check_arity('contains_node', \@_, qw(this nodename));
    my $st = _state($_[0]);
    my $name = arg_str($_[1]);
    $st->{remote}->check_usable;
    my $has = $st->{mirror}->has_node($name) ? 1 : 0;
    CRSBridge::Recorder::answered_locally($st, 'scheduler.contains_node', '"nodename":' . json_str($name),
        $has ? 'true' : 'false') if $st->{rec};
    return $has;
}

=item calculate_node_imbalance()

The node load imbalance (a number, 0 = balanced; formula per the C<imbalance> setting). Static
counts every service at its configured limits, Dynamic uses the measured node usage.

=cut

sub calculate_node_imbalance {
    check_arity('calculate_node_imbalance', \@_, qw(this)) if @_ != 1;
    my $st = _state($_[0]);
    return _query($st, 'calculate_node_imbalance', '');
}

=item score_best_balancing_migration_candidates(\@candidates, $limit)

C<\@candidates>: compact candidates as the HA manager builds them, C<{ leader => $sid,
resources => [ sids of the bundle, leader included ], nodes => [ target nodes ] }>. Returns
an array reference of at most C<$limit> scored migrations, lowest resulting imbalance first:
C<{ migration => { sid, 'source-node', 'target-node' }, imbalance => $number }>. Dies with
upstream's message for an invalid candidate (e.g. C<leader 'vm:1' is non-stationary>), and
with crs-bridge's for an unknown or same target node. A list of 1000 candidates or more is sent
in parts that the server expands while the next one is built (the answer is the whole list's).

=cut

sub score_best_balancing_migration_candidates {
    check_arity('score_best_balancing_migration_candidates', \@_, qw(this candidates limit)) if @_ != 3;
    return _score_migrations('score_best_balancing_migration_candidates', @_);
}

=item score_best_balancing_migration_candidates_topsis(\@candidates, $limit)

As above, ranked by TOPSIS over the resulting cpu and memory loads (each with its resulting
imbalance, not sorted by it).

=cut

sub score_best_balancing_migration_candidates_topsis {
    check_arity('score_best_balancing_migration_candidates_topsis', \@_, qw(this candidates limit));
    return _score_migrations('score_best_balancing_migration_candidates_topsis', @_);
}

sub _score_migrations {
    my $method = shift;
    my $st = _state($_[0]);
    my $parts = $st->{rec} && [];    # the candidates' JSON part by part, for the flight recorder
    my $staged = _score_in_parts($st, $method, $_[1], $_[2], $parts);
    if ($staged) {
        CRSBridge::Recorder::record($st, "scheduler.$method", ',"limit":' . json_int(arg_usize($_[2])),
            CRSBridge::Connection->instance->last_answer, undef, $parts) if $parts;
        return $staged;
    }
    my $candidates = candidates_param($_[1]);
    my $limit = arg_usize($_[2]);
    return _query($st, $method, ',"limit":' . json_int($limit), $candidates);
}

# Lists of at least PARTS_FROM candidates go in parts: each part is staged (expanded) by the
# server while Perl renders the next, and the staged list is scored as one, with the same answer
# as the whole list sent at once (scheduler.stage_candidates, score_staged_candidates). The first
# part is FIRST_PART bundles, so that the server starts early; each next one twice the last, up
# to PART.
use constant { PARTS_FROM => 1000, FIRST_PART => 125, PART => 500 };

# The scores of a long list scored in parts; undef for a short list, and whenever the server
# refused a part: the caller then sends the whole list, and dies (or not) as that call does.
# With \@parts, each part's JSON array is pushed there.
sub _score_in_parts {
    my ($st, $method, $parts) = @_[0, 1, 4];
    my $list = candidates_list($_[2]);
    return undef if !$list || @$list < PARTS_FROM;
    my $limit = eval { arg_usize($_[3]) } // return undef;    # the caller dies in perlmod's order
    my @calls;
    my ($at, $size) = (0, FIRST_PART);
    while ($at < @$list) {
        my @part = @$list[ $at .. ($at + $size <= @$list ? $at + $size : @$list) - 1 ];
        my $append = $at ? 'true' : 'false';
        my $params = sub {
            my $json = candidates_param(\@part);
            push @$parts, $json if $parts;
            return '"candidates":' . $json . qq(,"append":$append);
        };
        push @calls, [ 'scheduler.stage_candidates', $params ];
        $at += $size;
        $size = $size * 2 < PART ? $size * 2 : PART;
    }
    my $scorer = $method =~ /_topsis$/ ? 'topsis' : 'bruteforce';
    push @calls, [ 'scheduler.score_staged_candidates',
        '"count":' . @$list . ',"limit":' . json_int($limit) . qq(,"method":"$scorer") ];
    my $answers = CRSBridge::Connection->instance->call_series($st->{remote}, \@calls);
    return undef if grep { $_->{error} } @$answers;
    return $answers->[-1]{result};
}

=back

=head1 EXTRA METHODS (crs-bridge only, not in upstream's binding)

=over

=item select_best_balancing_migration(\@candidates, $imbalance_threshold)

Scores the candidates (bruteforce) and returns one scored migration, or undef when there are
none: with C<$imbalance_threshold> (a fraction, optional), the first candidate in input
order whose resulting imbalance is at or under it, else the best one.

=cut

sub select_best_balancing_migration {
    my $count = @_;
    check_arity('select_best_balancing_migration', $count == 2 ? [ @_, undef ] : \@_,
        qw(this candidates imbalance_threshold));
    my $st = _state($_[0]);
    my $candidates = candidates_param($_[1]);
    my $threshold = 'null';
    $threshold = json_num(check_finite('imbalance_threshold', arg_f64($_[2]))) if defined $_[2];
    return _query($st, 'select_best_balancing_migration', ',"imbalance_threshold":' . $threshold, $candidates);
}

=item select_best_balancing_migration_topsis(\@candidates)

The TOPSIS-best scored migration, or undef when there are no candidates.

=cut

sub select_best_balancing_migration_topsis {
    check_arity('select_best_balancing_migration_topsis', \@_, qw(this candidates));
    my $st = _state($_[0]);
    return _query($st, 'select_best_balancing_migration_topsis', '', candidates_param($_[1]));
}

=item plan_rebalance(\@candidates, \%opts) / explain_migrations(\@candidates, \%opts)

A dry run of the HA manager's rebalancing, and why one round moves what it moves (or
nothing): see L<CRSBridge::Planning>.

=back

=cut

sub plan_rebalance {
    check_arity('plan_rebalance', @_ == 2 ? [ @_, undef ] : \@_, qw(this candidates opts));
    my $st = _state($_[0]);
    my $params = CRSBridge::Planning::plan_params($_[1], $_[2]);
    return CRSBridge::Planning::plan_answer(_server_query($st, 'scheduler.plan_rebalance', $params));
}

sub explain_migrations {
    check_arity('explain_migrations', @_ == 2 ? [ @_, undef ] : \@_, qw(this candidates opts));
    my $st = _state($_[0]);
    return _server_query($st, 'explain_migrations', CRSBridge::Planning::explain_params($_[1], $_[2]));
}

sub DESTROY {
    my ($self) = @_;
    # At program end the server is being stopped anyway.
    return if ${^GLOBAL_PHASE} eq 'DESTRUCT';
    local ($@, $!, $?);
    my $st = ref $self && $self->{_crs} or return;
    # Released first: a signal handler that dies below (an alarm) must not leave it live.
    CRSBridge::Connection->release($st->{remote});
    CRSBridge::Recorder::finish($st) if $st->{rec};
    return;
}

1;
