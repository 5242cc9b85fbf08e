package CRSBridge::Scheduler;

# The methods PVE::RS::ResourceScheduling::Static and ::Dynamic share, and their object
# life cycle. A subclass provides BINDING (its package name, for error texts) and MODE.

use strict;
use warnings;

use CRSBridge::Args qw(
    check_arity check_invocant arg_string arg_str arg_usize arg_f64 check_finite plain_number MAX_CORES MAX_BYTES
);
use CRSBridge::Codec qw(json_str json_int json_num json_str_list JSON_NUM);
use CRSBridge::Config;
use CRSBridge::Connection;
use CRSBridge::Mirror;
use CRSBridge::Planning;
use CRSBridge::Records qw(candidates_param candidates_list resource_param);
use CRSBridge::Recorder;
use Scalar::Util ();

BEGIN {
    warnings->unimport('experimental::builtin') if $] >= 5.036;    # plain_number is one
    *_bool = defined &builtin::is_bool ? \&builtin::is_bool : sub { 0 };    # else: the exact path
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

# The adds' common case collected for their owners (see _resource_adder and _add_node), of one
# object at a time, so that nothing else is journaled while they wait. $ADDING: the object's
# state (undef: none); from Mirror::batch_view, $NODES and $KNOWN (its nodes and resources, to
# read) and $ROOM (bytes of memory left before a memory risk; $ROOM_AT_OPEN: at first);
# $PLACED: the placements collected (sid -> node, or [current, target]), for the mirror;
# $ORDER: undef until the batch adds a node, then the names of all nodes in order, and $NODES
# the batch's copy of the mirror's hash with the added ones, both for the mirror; @ENTRIES:
# their journal entries not yet journaled, in order, handed over once there are $DUE_AT
# (Connection::journal_room).
my ($ADDING, $NODES, $KNOWN, $ROOM, $ROOM_AT_OPEN, $PLACED, $ORDER, @ENTRIES, $DUE_AT);

# A new object of $class (the mode's new has checked its arity).
sub _new {
    my ($class) = @_;
    # create may call the server, whose answers may poison an object: no batch of adds stays open
    # across it (an add after it reopens one, checking the object's usable).
    _settle_adds() if $ADDING;
    my $formula = CRSBridge::Config::get('imbalance');
    my $st = { mode => $class->MODE, imbalance => $formula, mirror => CRSBridge::Mirror->new };
    CRSBridge::Connection->instance->create($st);
    CRSBridge::Recorder::start($st);
    return bless { _crs => $st }, $class;
}

# The state of a checked invocant (dies like perlmod for anything else). Every method but the
# adds starts here, so the fast adds collected so far are handed to their owners first (see
# _resource_adder): the mirror and the journal hold every add made.
sub _state {
    _settle_adds() if $ADDING;
    my $st = ref $_[0] && _reftype($_[0]) eq 'HASH' && $_[0]{_crs};
    return $st if $st;
    check_invocant($_[0], _binding($_[0]));
    return $_[0]{_crs};
}

# The state of a checked invocant, for an add: as _state, but the adds collected so far stay
# collected (an add hands them over when it takes the exact path). _resource_adder writes it out.
sub _adding_state {
    return ref $_[0] && _reftype($_[0]) eq 'HASH' && $_[0]{_crs} || _state($_[0]);
}

sub _binding {
    my ($self) = @_;
    return eval { $self->BINDING } // 'PVE::RS::ResourceScheduling';
}

# Journal a mutation: $method with $args, its arguments as JSON in the binding's order
# (array elements without brackets). The mirror method $op (with @args) checks it, dying with
# upstream's message, and records it, as one step with the journal entry (Connection::mutate:
# an alarm finds both made or neither). When the server will refuse a value ($refused), the
# mutation is sent at once instead, so that the server's message (naming the field) is what
# the caller sees (unless upstream fails anyway: the mirror checks first), and the mirror follows
# only if the server accepted it. $refused may be the client's own refusal, a message (a value
# JSON cannot carry, see CRSBridge::Records): raised once the mirror found no upstream error.
sub _mutate {
    my ($st, $method, $args, $refused, $op, @args) = @_;
    CRSBridge::Connection::check_usable($st);
    my $conn = CRSBridge::Connection->instance;
    if ($refused) {
        $st->{mirror}->check($op, @args);
        die $refused if $refused =~ /\n\z/;
        $conn->call_mutation($st, $method, $args, sub { $st->{mirror}->$op(@args) });
        return;
    }
    $conn->mutate($st, $method, $args, sub { $st->{mirror}->$op(@args) });
    return;
}

# The method add_service (static, $method 'add_service', $param 'service') or add_resource
# (dynamic: 'add_resource', 'resource'): ($self, $sid, \%resource), the caller's scalars (the
# decoders judge them as perlmod does).
#
# The common case runs once per guest and HA round, so it is written out in this one sub, with
# no calls but a few builtins (a function of each owner instead, Records rendering, Mirror
# recording, Connection journaling, measured 0.55 us more per guest: +8 % of a 16 x 2000 round,
# +5 % at 48 x 10000, with benchmarks/ha_round_sizes.pl; the Records function alone, with the
# batch below, 0.4 us): a plain sid and a plain resource (a
# hash of plain numbers within crs-bridge's bounds and plain names, as CRSBridge::Records
# defines them), for which the exact decoders would give the same values and accept them,
# rendered as they would render them (perl-client/t/fast-path.t holds the two together).
#
# Who owns what: the add's checks and records are the mirror's (CRSBridge::Mirror), its journal
# entry and when entries are sent are the connection's (CRSBridge::Connection); this module
# writes neither. An add of a new resource on known nodes (stationary, or moving between two),
# the common case, cannot fail: it is checked against what the mirror gives for that
# (Mirror::batch_view) and collected in this module's batch (see $ADDING), without a call. The
# batch goes to its owners whole: its journal entries once there are as many as the connection
# takes before its next flush (Connection::journal_room, journal_many), its placements and
# entries before anything else uses an object (_settle_adds: from _state, DESTROY, an add of
# another object or one taking the exact path; Mirror::add_batch), so that the mirror, the
# journal and the flushes are what they would be add by add. Any other sid or resource, and an
# add that fails, is decoded exactly and goes through _mutate, where the mirror dies with
# upstream's message (a value the server refuses, or a node's memory near its limit
# (Mirror::memory_risk), is sent as a single call, for the server's message), so errors come
# from one place.
sub _resource_adder {
    my ($method, $param) = @_;
    return sub {
        check_arity($method, \@_, 'this', 'sid', $param) if @_ != 3;
        my ($self, $sid, $r) = @_;
        my $st = ref $self && _reftype($self) eq 'HASH' && $self->{_crs} || _state($_[0]);
        FAST: {
            last FAST if ref $r ne 'HASH' || !defined $sid || ref $sid || plain_number($sid)
                || $sid eq '' || $sid =~ tr/\x00-\x1f"\\//;
            my ($s, $running, $current, $target) = @$r{ 'stats', 'running', 'current-node', 'target-node' };
            last FAST if ref $s ne 'HASH' || !(plain_number($running) || _bool($running))
                || !defined $current || ref $current || plain_number($current) || $current eq ''
                || $current =~ tr/\x00-\x1f"\\//
                || defined $target
                && (ref $target || plain_number($target) || $target eq '' || $target =~ tr/\x00-\x1f"\\//);
            my ($stats, $maxmem);
            if ($st->{mode} eq 'static') {
                my $maxcpu;
                ($maxcpu, $maxmem) = @$s{qw(maxcpu maxmem)};
                # NaN fails the comparisons; bytes: see CRSBridge::Records::node_stats_param.
                last FAST if !plain_number($maxcpu) || !plain_number($maxmem)
                    || !($maxcpu >= 0 && $maxcpu <= MAX_CORES && $maxmem >= 0 && $maxmem < MAX_BYTES + 1);
                $stats = '{"maxcpu":' . ($maxcpu == int($maxcpu) ? int($maxcpu) : sprintf(JSON_NUM, $maxcpu))
                    . ',"maxmem":' . int($maxmem) . '}';
            } else {
                my ($cpu, $maxcpu, $mem);
                ($cpu, $maxcpu, $mem, $maxmem) = @$s{qw(cpu maxcpu mem maxmem)};
                last FAST
                    if !plain_number($cpu) || !plain_number($maxcpu) || !plain_number($mem) || !plain_number($maxmem)
                    || !($cpu >= 0 && $cpu <= MAX_CORES && $maxcpu >= 0 && $maxcpu <= MAX_CORES)
                    || !($mem >= 0 && $mem < MAX_BYTES + 1 && $maxmem >= 0 && $maxmem < MAX_BYTES + 1);
                $stats = '{"cpu":' . ($cpu == int($cpu) ? int($cpu) : sprintf(JSON_NUM, $cpu))
                    . ',"maxcpu":' . ($maxcpu == int($maxcpu) ? int($maxcpu) : sprintf(JSON_NUM, $maxcpu))
                    . ',"mem":' . int($mem) . ',"maxmem":' . int($maxmem) . '}';
            }
            # One concatenation (qq() strings would each be one of their own).
            my $entry = '["' . $method . '","' . $sid . '",{"stats":' . $stats . ',"running":'
                . ($running ? 'true' : 'false') . ',"current-node":"' . $current
                . (defined $target ? '","target-node":"' . $target . '"}]' : '"}]');
            # Names with characters past Latin-1 (one test for all three): arg_string checks them.
            last FAST if utf8::is_utf8($entry);
            # The object's batch, opened at its first add since anything else was done.
            last FAST if ($ADDING // 0) != $st && !_open_adds($st);
            $maxmem = int($maxmem);
            # A node's memory might near the server's limit: the exact path sends the add as a call.
            last FAST if $maxmem >= $ROOM;
            # An add that fails (the mirror's message) takes the exact path.
            last FAST if !exists $NODES->{$current} || exists $KNOWN->{$sid} || exists $PLACED->{$sid}
                || defined $target && ($target eq $current || !exists $NODES->{$target});
            # One statement: a signal handler that dies (an alarm) finds the add made or not at all.
            $ROOM -= $maxmem, $PLACED->{$sid} = defined $target ? [ $current, $target ] : $current,
                push @ENTRIES, $entry;
            _journal_adds() if @ENTRIES >= $DUE_AT;
            return;
        }
        _settle_adds() if $ADDING;
        $sid = arg_string($_[1]);
        my ($json, $refused, $current, $target, $maxmem) = resource_param($_[2], $st->{mode}, $param);
        $refused ||= $sid eq '' || $st->{mirror}->memory_risk($maxmem);
        _mutate($st, $method, json_str($sid) . ",$json", $refused, add_resource => $sid, $current, $target, $maxmem);
        return;
    };
}

# add_node of either mode, its arguments decoded ($stats: the JSON after the name, as the
# mode's add_node renders it; $refused as for _mutate; $mem: the node's memory in use, bytes, or
# undef). A new node with a name the server takes is collected in the adds' batch (it cannot
# fail: a node of that name is neither in the mirror nor in the batch), so that a round's nodes
# cost no call of their own; any other add (a duplicate, an unusable object, a value the server
# refuses) goes through _mutate, whose mirror dies with upstream's message.
sub _add_node {
    my ($st, $name, $stats, $refused, $mem) = @_;
    my $args = json_str($name) . ',' . $stats;
    if (!$refused && $name ne '' && (($ADDING // 0) == $st || _open_adds($st)) && !exists $NODES->{$name}) {
        # The batch's own copies of the node names, taken at its first node (one statement: a
        # signal handler that dies finds both or neither).
        ($NODES, $ORDER) = ({%$NODES}, $st->{mirror}->node_names) if !$ORDER;
        # One statement: a signal handler that dies (an alarm) finds the add made or not at all.
        $ROOM -= $mem // 0, $NODES->{$name} = 1, push(@$ORDER, $name), push @ENTRIES, qq(["add_node",$args]);
        _journal_adds() if @ENTRIES >= $DUE_AT;
        return;
    }
    _settle_adds() if $ADDING;
    _mutate($st, 'add_node', $args, $refused || $name eq '', add_node => $name, $mem);
    return;
}

# Opens a batch of $st's adds, after handing over another object's; false when the object is
# unusable (the exact path dies saying why, after the arguments' decoding errors).
sub _open_adds {
    my ($st) = @_;
    _settle_adds() if $ADDING;
    return 0 if !CRSBridge::Connection::usable($st);
    ($NODES, $KNOWN, $ROOM) = $st->{mirror}->batch_view;
    ($ROOM_AT_OPEN, $PLACED, $ORDER, $DUE_AT) = ($ROOM, {}, undef, CRSBridge::Connection::journal_room());
    $ADDING = $st;
    return 1;
}

# Journals the collected entries (the connection flushes, as it is due).
sub _journal_adds {
    CRSBridge::Connection::journal_many($ADDING, \@ENTRIES);
    $DUE_AT = CRSBridge::Connection::journal_room();
    return;
}

# Hands the batch to the mirror, then to the journal, and closes it. A signal handler that dies
# in between leaves it open, to be handed over again (see Mirror::add_batch and
# Connection::journal_many).
sub _settle_adds {
    $ADDING->{mirror}->add_batch($PLACED, $ROOM_AT_OPEN - $ROOM, $ORDER ? ($NODES, $ORDER) : ());
    CRSBridge::Connection::journal_many($ADDING, \@ENTRIES);
    $ADDING = undef;
    ($NODES, $KNOWN, $PLACED, $ORDER) = ();    # the mirror's hashes go with its object
    return;
}

# A remove of either mode (remove_service_usage / remove_resource): unknown sids are a no-op
# upstream, so only known ones are journaled.
sub _remove_resource {
    my ($st, $method, $sid) = @_;
    CRSBridge::Connection::check_usable($st);
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
    my $conn = CRSBridge::Connection->instance;
    return $conn->query($st, $method, $sent) if !$st->{rec};
    return CRSBridge::Recorder::query($st, $method, $params, sub { $conn->query($st, $method, $sent) },
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
    CRSBridge::Connection::check_usable($st);
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
    CRSBridge::Connection::check_usable($st);
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
    CRSBridge::Connection::check_usable($st);
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
            $CRSBridge::Connection::ANSWER, undef, $parts) if $parts;
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
    my $answers = CRSBridge::Connection->instance->call_series($st, \@calls);
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
    CRSBridge::Connection->release($st);
    _settle_adds() if ($ADDING // 0) == $st;    # the recorder writes the whole journal
    CRSBridge::Recorder::finish($st) if $st->{rec};
    return;
}

1;
