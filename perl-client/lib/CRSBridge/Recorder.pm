package CRSBridge::Recorder;

# The flight recorder: what a scheduler object saw and answered, written as one JSON file when
# the object is dropped, so that an operator can ask `crs-bridge explain` why the daemon took a
# decision and `crs-bridge replay` whether a fresh server takes the same one, bit for bit.
#
# It costs a round almost nothing until the object is dropped: the mutations are in the
# object's journal already (CRSBridge::Connection keeps it to restore a new server), a query
# keeps the params text it sent and the answer line as the server wrote it (no re-encoding,
# so no number loses a bit). The file is built from those texts by string operations; only a
# journal with removals or legacy adds before the last balancing query is parsed entry by
# entry (CRSBridge::Mirror applies them, as the client applied them before).

use strict;
use warnings;

use Fcntl qw(O_WRONLY O_CREAT O_EXCL);
use POSIX ();
use Time::HiRes ();

use CRSBridge::Codec qw(decode_json_text json_str json_int);
use CRSBridge::Mirror;

=head1 NAME

CRSBridge::Recorder - flight recorder of the crs-bridge scheduler objects

=head1 DESCRIPTION

Off by default. With a directory set (C<record> in the config file, or C<CRS_BRIDGE_RECORD>),
every scheduler object writes C<crs-TIME-PID-N.json> there when it is dropped: a CLUSTER for
C<crs-bridge plan> and C<crs-bridge explain> (C<usage> as it was at the object's last balancing
query, that query's C<candidates>, its C<method>, C<limit> and the object's C<imbalance>
formula) plus C<record>: the object's mode, formula, mutations and every query with its
params and the answer it got, which C<crs-bridge replay> re-runs. Objects still alive at
program end are not written.

At most C<record-max-files> files and C<record-max-bytes> bytes are kept (the oldest go
first; a record larger than the byte cap on its own is not written). Recording never fails a
call: a directory that cannot be written gives one warning per process and the object goes on.

=head1 ENVIRONMENT

C<CRS_BRIDGE_RECORD> (a directory; empty or unset: off), C<CRS_BRIDGE_RECORD_MAX_FILES>
(default 200), C<CRS_BRIDGE_RECORD_MAX_BYTES> (default 67108864, 64 MiB).

=head1 FUNCTIONS

=over

=cut

use constant { DEFAULT_MAX_FILES => 200, DEFAULT_MAX_BYTES => 64 * 1024 * 1024 };

# The methods whose answer is a balancing decision: the last one's candidates are the file's.
my %BALANCING = map { ("scheduler.$_" => 1) } qw(
    score_best_balancing_migration_candidates score_best_balancing_migration_candidates_topsis
    select_best_balancing_migration select_best_balancing_migration_topsis
);

my %WARNED;    # what was warned about already in this process (warn once)
my $SEQUENCE = 0;    # files written by this process, for unique names
my %SIZE;    # directory -> {file name -> bytes} of its records (each file's size is read once)

# The recorder's settings: (directory or undef, most files, most bytes). The one place they
# are read (environment only for now; the config file's keys record, record-max-files,
# record-max-bytes come with CRSBridge::Config).
sub settings {
    my $dir = $ENV{CRS_BRIDGE_RECORD};
    return (undef) if !defined $dir || $dir eq '';
    return (
        $dir,
        _count('CRS_BRIDGE_RECORD_MAX_FILES', DEFAULT_MAX_FILES),
        _count('CRS_BRIDGE_RECORD_MAX_BYTES', DEFAULT_MAX_BYTES),
    );
}

sub _count {
    my ($var, $default) = @_;
    my $value = $ENV{$var};
    return $default if !defined $value || $value eq '';
    return 0 + $value if $value =~ /^\s*\d+\s*$/ && $value > 0;
    _warn_once($var, "crs-bridge: $var must be a positive integer, got '$value'; using $default\n");
    return $default;
}

=item start(\%state)

Called for a new object: sets C<$state-E<gt>{rec}> when recording is on.

=cut

sub start {
    my ($st) = @_;
    my ($dir, $max_files, $max_bytes) = settings();
    $st->{rec} = { dir => $dir, max_files => $max_files, max_bytes => $max_bytes, calls => [] } if defined $dir;
    return;
}

=item query(\%state, $method, $params_json, \&run)

Runs C<run> (a server call of C<$method>, the full name, with C<$params_json>, members
without braces, the handle left out) and records it with the answer line the server wrote (an answer that dies is recorded
too); returns or dies as C<run> does.

=cut

sub query {
    my ($st, $method, $params, $run) = @_;
    local $CRSBridge::Connection::ANSWER;
    my $result = eval { $run->() };
    my $error = $@;
    record($st, $method, $params, $CRSBridge::Connection::ANSWER, $error);
    die $error if $error;
    return $result;
}

=item record(\%state, $method, $params_json, \$answer_line, $error)

Records a call: C<\$answer_line> is the server's answer as it wrote it (a reference to its
UTF-8 bytes), or undef when the call got none (C<$error> says why; such a call is not
compared by replay).

=cut

sub record {
    my ($st, $method, $params, $answer, $error) = @_;
    my $text;
    if ($answer) {
        $text = $$answer;
        chomp $text;
        utf8::decode($text);    # the file is assembled from character strings
    }
    push @{ $st->{rec}{calls} }, {
        at => scalar @{ $st->{jf} }, method => $method, params => $params, answer => $text,
        ($text ? () : (error => "$error")),
    };
    return;
}

=item record_staged(\%state, $method, \@candidate_parts, $limit)

Records a scoring sent in parts (CRSBridge::Scheduler) as the single call it stands for: the
parts' JSON arrays joined, and the answer of the last request (the scores).

=cut

sub record_staged {
    my ($st, $method, $parts, $limit) = @_;
    my $candidates = '[' . join(',', map { substr($_, 1, -1) } grep { $_ ne '[]' } @$parts) . ']';
    record($st, $method, '"candidates":' . $candidates . ',"limit":' . json_int($limit), $CRSBridge::Connection::ANSWER);
    return;
}

=item answered_locally(\%state, $method, $params_json, $result_json)

Records a query the client answers itself (C<list_nodes>, C<contains_node>).

=cut

sub answered_locally {
    my ($st, $method, $params, $result) = @_;
    my $answer = '{"result":' . $result . '}';
    record($st, $method, $params, \$answer);
    return;
}

=item finish(\%state)

Called when the object is dropped: writes its file and applies the caps. Never dies; a
failure warns once per process and directory.

=cut

sub finish {
    my ($st) = @_;
    my $rec = delete $st->{rec} or return;
    local ($@, $!);
    eval { _write($rec, _file_text($st, $rec)); 1 }
        or _warn_once("write $rec->{dir}", "crs-bridge: flight recorder: $@");
    return;
}

sub _warn_once {
    my ($what, $message) = @_;
    return if $WARNED{$what}++;
    $message .= "\n" if $message !~ /\n\z/;
    warn $message;
    return;
}

# -- the file --------------------------------------------------------------------------------

sub _file_text {
    my ($st, $rec) = @_;
    my $calls = $rec->{calls};
    my ($last) = grep { $BALANCING{ $calls->[$_]{method} } } reverse 0 .. $#$calls;
    my $jf = $st->{jf};
    my $upto = defined $last ? $calls->[$last]{at} : @$jf;
    my ($nodes, $resources, $derived) = _usage_at($st->{mode}, $jf, $upto);
    my ($candidates, $limit) = ('[]', '');
    if (defined $last) {
        # The balancing query's candidates are written once, as the file's; its params refer to them.
        # Its params: '"candidates":[...]' and maybe ',"limit":N' or ',"imbalance_threshold":X'.
        my $params = $calls->[$last]{params};
        my $end = substr($params, -1) eq ']' ? length $params : rindex($params, ',"');
        $candidates = substr($params, 13, $end - 13);
        my $tail = substr($params, $end);
        $calls->[$last]{params} = '"candidates":"@candidates"' . $tail;
        ($limit) = $tail =~ /^,"limit":(\d+)$/;
    }
    my $method = defined $last && $calls->[$last]{method} =~ /_topsis$/ ? 'topsis' : 'bruteforce';
    my @journal = @$jf[ ($derived ? $upto : 0) .. $#$jf ];
    return '{"usage":{"mode":' . json_str($st->{mode}) . ',"nodes":[' . $nodes . '],"resources":[' . $resources
        . ']},"candidates":' . $candidates . ',"method":"' . $method . '"' . (defined $limit ? ",\"limit\":$limit" : '')
        . ',"imbalance":' . json_str($st->{imbalance})
        . ',"record":{"format":1,"mode":' . json_str($st->{mode}) . ',"imbalance":' . json_str($st->{imbalance})
        . ',"pid":' . $$ . ',"time":' . json_str(_utc_time()) . ',"journal-from-usage":' . ($derived ? 'true' : 'false')
        . ',"journal":[' . join(',', @journal) . '],"calls":[' . join(',', map { _call_json($_) } @$calls) . "]}}\n";
}

sub _call_json {
    my ($call) = @_;
    return '{"at":' . $call->{at} . ',"method":' . json_str($call->{method}) . ',"params":{' . $call->{params} . '}'
        . (defined $call->{answer} ? ',"answer":' . $call->{answer} : ',"no-answer":' . json_str($call->{error}))
        . '}';
}

sub _utc_time {
    my ($seconds, $micro) = Time::HiRes::gettimeofday();
    return POSIX::strftime('%Y%m%dT%H%M%S', gmtime $seconds) . sprintf('.%06dZ', $micro);
}

# The usage after the first $upto journal entries, as the JSON members of usage.nodes and
# usage.resources, and whether those entries are exactly the usage's nodes then resources in
# order (the file then leaves them out of its journal: replay derives them from the usage).
sub _usage_at {
    my ($mode, $jf, $upto) = @_;
    my $k = 0;
    $k++ while $k < $upto && substr($jf->[$k], 0, 12) eq '["add_node",';
    my $add = $mode eq 'static' ? '["add_service",' : '["add_resource",';
    my $at = length $add;
    my @resources;
    for my $entry (@$jf[ $k .. $upto - 1 ]) {
        return _usage_replayed($mode, $jf, $upto) if substr($entry, 0, $at) ne $add;
        # The sid's literal ends at the first '",{"': inside a JSON string a quote is escaped.
        my $q = index($entry, '",{"', $at);
        push @resources, '{"sid":' . substr($entry, $at, $q + 1 - $at) . ',' . substr($entry, $q + 3, -1);
    }
    my $nodes = join(',', map { _node_json(_entry($_)) } @$jf[ 0 .. $k - 1 ]);
    return ($nodes, join(',', @resources), 1);
}

my $STRING = qr/"(?:[^"\\]++|\\.)*+"/s;

# A journal entry's method and arguments: names decoded, records as their JSON text.
sub _entry {
    my ($entry) = @_;
    my ($method, $args) = $entry =~ /^\["(\w+)",(.*)\]$/s or die "unexpected journal entry $entry\n";
    my @args;
    while ($args =~ /\G($STRING|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}|[^,]+),?/gc) {
        my $arg = $1;
        push @args, substr($arg, 0, 1) eq '"' ? _string($arg) : $arg;
    }
    return ($method, @args);
}

sub _string {
    my ($literal) = @_;
    utf8::encode($literal);
    return decode_json_text($literal);
}

sub _node_json {
    my ($method, $name, @stats) = @_;
    return '{"name":' . json_str($name) . ',"maxcpu":' . $stats[0] . ',"maxmem":' . $stats[1] . '}' if @stats == 2;
    return '{"name":' . json_str($name) . ',' . substr($stats[0], 1);
}

# The usage after the first $upto entries of a journal with removals or legacy adds: each
# entry applied to a mirror as the client applied it, the resources in the order the server
# keeps them (a re-added or legacy-moved sid goes last).
sub _usage_replayed {
    my ($mode, $jf, $upto) = @_;
    my $mirror = CRSBridge::Mirror->new;
    my (%node, %stats, %running, %order);
    my $n = 0;
    for my $entry (@$jf[ 0 .. $upto - 1 ]) {
        my ($method, @args) = _entry($entry);
        if ($method eq 'add_node') {
            $mirror->add_node($args[0]);
            $node{ $args[0] } = _node_json($method, @args);
        } elsif ($method eq 'remove_node') {
            $mirror->remove_node($args[0]);
        } elsif ($method eq 'add_service' || $method eq 'add_resource') {
            my ($sid, $resource) = @args;
            my ($stats, $run, $current, $target) = $resource
                =~ /^\{"stats":(\{[^{}]*\}),"running":(true|false),"current-node":($STRING)(?:,"target-node":($STRING))?\}$/
                or die "unexpected resource in the journal: $resource\n";
            $mirror->add_resource($sid, _string($current), defined $target ? _string($target) : undef, 0);
            ($stats{$sid}, $running{$sid}, $order{$sid}) = ($stats, $run, ++$n);
        } elsif ($method eq 'add_service_usage_to_node') {
            my ($name, $sid, $legacy_stats) = @args;
            if (!$mirror->has_resource($sid)) {
                ($stats{$sid}, $running{$sid}) = ($legacy_stats, 'true');
            }
            $mirror->legacy_add($name, $sid, 0);
            $order{$sid} = ++$n;    # taken out and added again: last
        } else {    # remove_service_usage, remove_resource
            $mirror->remove_resource($args[0]);
        }
    }
    my $placed = $mirror->{res};
    my @resources = map {
        my $placement = $placed->{$_};
        my ($current, $target) = ref $placement ? @$placement : ($placement);
        '{"sid":' . json_str($_) . ',"stats":' . $stats{$_} . ',"running":' . $running{$_} . ',"current-node":'
            . json_str($current) . (defined $target ? ',"target-node":' . json_str($target) : '') . '}'
    } sort { $order{$a} <=> $order{$b} } keys %$placed;
    return (join(',', map { $node{$_} } @{ $mirror->node_names }), join(',', @resources), 0);
}

# -- the directory ---------------------------------------------------------------------------

sub _write {
    my ($rec, $text) = @_;
    my $dir = $rec->{dir};
    utf8::encode($text);
    my $bytes = length $text;
    if ($bytes > $rec->{max_bytes}) {
        _warn_once("size $dir", "crs-bridge: flight recorder: a record of $bytes bytes exceeds"
            . " the cap of $rec->{max_bytes} bytes (CRS_BRIDGE_RECORD_MAX_BYTES); not written\n");
        return;
    }
    my $name = sprintf('crs-%s-%d-%d.json', _utc_time(), $$, ++$SEQUENCE);
    my $temp = "$dir/.$name.tmp";
    # Written aside and renamed: a reader never sees half a file, a full disk leaves none.
    sysopen(my $fh, $temp, O_WRONLY | O_CREAT | O_EXCL, 0640) or die "cannot create $temp: $!\n";
    my $written = syswrite($fh, $text);
    my $ok = defined $written && $written == $bytes && close($fh);
    my $why = defined $written && $written != $bytes ? 'short write' : "$!";
    if (!$ok || !rename($temp, "$dir/$name")) {
        $why = "$!" if $ok;
        unlink $temp;
        die "cannot write $dir/$name: $why\n";
    }
    $SIZE{$dir}{$name} = $bytes;
    _apply_caps($rec);
    return;
}

# Remove the oldest records (by name: the time comes first) beyond the caps.
sub _apply_caps {
    my ($rec) = @_;
    my $dir = $rec->{dir};
    opendir(my $dh, $dir) or die "cannot list $dir: $!\n";
    my @names = sort grep { /^crs-.*\.json$/ } readdir $dh;
    closedir $dh;
    my $known = $SIZE{$dir} // {};
    my %size = map { ($_ => $known->{$_} // (-s "$dir/$_") // 0) } @names;
    $SIZE{$dir} = \%size;    # the files gone (removed elsewhere) are forgotten
    my $total = 0;
    $total += $_ for values %size;
    while (@names > $rec->{max_files} || $total > $rec->{max_bytes}) {
        my $name = shift @names;
        $total -= delete $size{$name};
        unlink "$dir/$name";
    }
    return;
}

=back

=cut

1;
