package CRSBridge::Recorder;

# The flight recorder: what a scheduler object saw and answered, written as one JSON file when
# the object is dropped, so that an operator can ask `crs-bridge explain` why the daemon took a
# decision and `crs-bridge replay` whether a fresh server takes the same one, bit for bit.
#
# It costs a round almost nothing: the mutations are in the object's journal already
# (CRSBridge::Mirror keeps it, to restore a new server), a query keeps the params text it
# sent and the answer line as the server wrote it (no re-encoding, so no number loses a bit),
# and the file is those texts joined. Nothing is parsed or rendered per guest: the usage at the
# decision is the journal up to it, which crs-bridge plan/explain apply on a fresh server (the
# state the daemon's server had, to the last bit, removals and legacy adds included).

use strict;
use warnings;

use Fcntl qw(O_WRONLY O_CREAT O_EXCL);
use File::Path ();
use POSIX ();
use Time::HiRes ();

use CRSBridge::Codec qw(json_str);
use CRSBridge::Config;
use CRSBridge::Connection ();

=head1 NAME

CRSBridge::Recorder - flight recorder of the crs-bridge scheduler objects

=head1 DESCRIPTION

Off by default. With a directory set (C<record> in the config file, or C<CRS_BRIDGE_RECORD>),
every scheduler object writes C<crs-TIME-PID-N.json> there when it is dropped: a CLUSTER for
C<crs-bridge plan> and C<crs-bridge explain> (the C<candidates> of the object's last balancing
query, the decision, with its C<method> and C<limit>, and the object's C<imbalance> formula)
whose C<record> holds the object's mode, its mutations (the usage at the decision is the
mutations before it) and every query with its params and the answer it got, which
C<crs-bridge replay> re-runs (see crs_bridge/replay.py for the format). An object that lives until
global destruction (held by a package variable at exit) is not written.

At most C<record-max-files> files and C<record-max-bytes> bytes are kept (the oldest, by when
they were written, go first; a record larger than the byte cap on its own is not written).
Only the recorder's own files count (C<crs-TIME-PID-N.json>): an operator's copy under another
name is left alone. When an old record cannot be removed, the process warns and writes no more
records there: the caps bound the disk the recorder takes. The directory is listed
every 16th record a process writes (listing it each time cost a round 1-2 %), so files that
other processes put there count from the next listing on. Recording never fails a
call: a directory that cannot be written gives one warning per process and the object goes on.

=head1 ENVIRONMENT

C<CRS_BRIDGE_RECORD> (a directory; empty or unset: off), C<CRS_BRIDGE_RECORD_MAX_FILES>
(default 200), C<CRS_BRIDGE_RECORD_MAX_BYTES> (default 67108864, 64 MiB).

=head1 FUNCTIONS

=over

=cut

my %WARNED;    # what was warned about already in this process (warn once)
my $SEQUENCE = 0;    # files written by this process, for unique names
# Directory -> { names => [its records, oldest first], size => {name -> bytes}, fresh => how many
# more writes trust this listing }: a directory is listed every LIST_EVERY writes only (its
# other writers' files count from the next listing on).
my %DIRS;
use constant LIST_EVERY => 16;

# The recorder's settings: (directory or undef, most files, most bytes), from the config file's
# keys record, record-max-files, record-max-bytes (or their variables). A bad value turns the
# recorder off with one warning instead of failing the round.
sub settings {
    my @settings = eval {
        my $dir = CRSBridge::Config::get('record');
        $dir eq 'off' ? (undef) : ($dir, map { CRSBridge::Config::get($_) } qw(record-max-files record-max-bytes));
    };
    return @settings if !$@;
    _warn_once('settings', "crs-bridge: flight recorder off: $@");
    return (undef);
}

=item start(\%state)

Called for a new object: sets C<$state-E<gt>{rec}> when recording is on. Only the process
that created an object records it (a forked child's copy is not written).

=cut

sub start {
    my ($st) = @_;
    my ($dir, $max_files, $max_bytes) = settings();
    $st->{rec} = { dir => $dir, max_files => $max_files, max_bytes => $max_bytes, calls => [], pid => $$ }
        if defined $dir;
    return;
}

=item query(\%state, $method, $params_json, \&run, \@candidates)

Runs C<run> (a server call of C<$method>, the full name, with C<$params_json>, members
without braces, the handle left out) and records it with the answer line the server wrote (an
answer that dies is recorded too); returns or dies as C<run> does. For a balancing query,
C<\@candidates> holds the candidates' JSON arrays (in parts) and C<$params_json> the other
params, each member after a comma.

=cut

sub query {
    my ($st, $method, $params, $run, $candidates) = @_;
    my $conn = CRSBridge::Connection->instance;
    $conn->forget_answer;
    my $result = eval { $run->() };
    my $error = $@;
    record($st, $method, $params, $conn->last_answer, $error, $candidates);
    die $error if $error;
    return $result;
}

=item record(\%state, $method, $params_json, \$answer_line, $error, \@candidates)

Records a call (params as for C<query>): C<\$answer_line> is the server's answer as it wrote
it (a reference to its UTF-8 bytes), or undef when the call got none (C<$error> says why; such
a call is not compared by replay).

=cut

sub record {
    my ($st, $method, $params, $answer, $error, $candidates) = @_;
    my $text;
    if ($answer) {
        $text = $$answer;
        chomp $text;
        utf8::decode($text);    # the file's parts are character strings
    }
    push @{ $st->{rec}{calls} }, {
        at => scalar @{ $st->{mirror}->journal }, method => $method, params => $params, answer => $text,
        ($text ? () : (error => "$error")), ($candidates ? (candidates => $candidates) : ()),
    };
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
    return if $rec->{pid} != $$;    # a forked child's copy: the object's own process writes it
    local ($@, $!);
    eval { _write($rec, _file_parts($st, $rec)); 1 }
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

# The file's parts, in order: JSON texts encoded to UTF-8 (in place: the object is gone), or
# [text, offset, length] for a part of one. The long ones, the journal and the decision's
# candidates, are joined once or not at all.
sub _file_parts {
    my ($st, $rec) = @_;
    my $calls = $rec->{calls};
    # The decision: the last balancing query that got a result. A failed one, or a select with
    # its threshold, is not what explain shows: the decision is the last scoring answer.
    my ($decision) = grep { _decides($calls->[$_]) } reverse 0 .. $#$calls;
    my ($candidates, $limit, $method) = ([], '', 'bruteforce');
    if (defined $decision) {
        my $call = $calls->[$decision];
        $candidates = delete $call->{candidates};    # the file's; its params refer to them
        $call->{params} = '"candidates":"@candidates"' . $call->{params};
        $limit = ",\"limit\":$1" if $call->{params} =~ /,"limit":(\d+)$/;
        $method = 'topsis' if $call->{method} =~ /_topsis$/;
    }
    utf8::encode($_) for @$candidates;    # before _list_parts takes their lengths
    my ($mode, $formula) = (json_str($st->{mode}), json_str($st->{imbalance}));
    my $options = qq(,"method":"$method"$limit,"imbalance":$formula,"record":{"format":1,"mode":$mode)
        . qq(,"imbalance":$formula,"pid":$$,"time":) . json_str(_utc_time()) . ',"decision":' . ($decision // 'null')
        . ',"journal":[';
    my $journal = join(',', @{ $st->{mirror}->journal });
    my $rest = '],"calls":[' . join(',', map { _call_json($_) } @$calls) . "]}}\n";
    utf8::encode($_) for $options, $journal, $rest;
    return ('{"candidates":', _list_parts($candidates), $options, $journal, $rest);
}

sub _decides {
    my ($call) = @_;
    return $call->{candidates} && $call->{method} !~ /select_best/ && defined $call->{answer}
        && $call->{answer} =~ /^\{"jsonrpc":"2\.0","result":/;
}

# JSON arrays as the parts of one array: their elements, written from where they are.
sub _list_parts {
    my @arrays = grep { $_ ne '[]' } @{ $_[0] };
    return '[]' if !@arrays;
    return $arrays[0] if @arrays == 1;
    return ('[', (map { ([ $_, 1, length($_) - 2 ], ',') } @arrays)[ 0 .. 2 * $#arrays ], ']');
}

sub _call_json {
    my ($call) = @_;
    my $params = $call->{params};
    if (my $candidates = $call->{candidates}) {    # a balancing query before the decision
        $params = '"candidates":' . join('', map { ref $_ ? substr($_->[0], $_->[1], $_->[2]) : $_ } _list_parts($candidates))
            . $params;
    }
    return '{"at":' . $call->{at} . ',"method":' . json_str($call->{method}) . ',"params":{' . $params . '}'
        . (defined $call->{answer} ? ',"answer":' . $call->{answer} : ',"no-answer":' . json_str($call->{error}))
        . '}';
}

sub _utc_time {
    my ($seconds, $micro) = Time::HiRes::gettimeofday();
    return POSIX::strftime('%Y%m%dT%H%M%S', gmtime $seconds) . sprintf('.%06dZ', $micro);
}

# -- the directory ---------------------------------------------------------------------------

# Writes the file of the parts @_ (see _file_parts).
sub _write {
    my $rec = shift;
    my $dir = $rec->{dir};
    my $bytes = 0;
    $bytes += ref $_ ? $_->[2] : length $_ for @_;
    if ($bytes > $rec->{max_bytes}) {
        _warn_once("size $dir", "crs-bridge: flight recorder: a record of $bytes bytes exceeds"
            . " the cap of $rec->{max_bytes} bytes (record-max-bytes); not written\n");
        return;
    }
    return if $DIRS{$dir} && $DIRS{$dir}{full};    # its caps cannot be kept (warned)
    my $name = sprintf('crs-%s-%d-%d.json', _utc_time(), $$, ++$SEQUENCE);
    my $temp = "$dir/.$name.tmp";
    # The configured directory is made on first use, as a log directory would be.
    File::Path::make_path($dir, { mode => 0750, error => \my $trouble }) if !-d $dir;
    # Written aside and renamed: a reader never sees half a file, a full disk leaves none.
    sysopen(my $fh, $temp, O_WRONLY | O_CREAT | O_EXCL, 0640) or die "cannot create $temp: $!\n";
    my $error;
    for (@_) {
        my ($text, $offset, $length) = ref $_ ? @$_ : ($_, 0, length $_);
        my $written = syswrite($fh, $text, $length, $offset);
        next if defined $written && $written == $length;
        $error = defined $written ? 'short write (disk full?)' : "$!";
        last;
    }
    $error = "$!" if !defined $error && !(close($fh) && rename($temp, "$dir/$name"));
    if (defined $error) {
        unlink $temp;
        die "cannot write $dir/$name: $error\n";
    }
    _apply_caps($rec, $name, $bytes);
    return;
}

# The names of the recorder's own files (what _write names them), the name captured: a name
# from readdir is tainted under perl -T, the capture is not. Other files (an operator's saved
# crs-keep.json) are neither counted nor removed.
my $RECORD_NAME = qr/^(crs-\d{8}T\d{6}\.\d{6}Z-\d+-\d+\.json)\z/;

# Counts the new record $name of $bytes and removes the oldest records beyond the caps. Dies
# when an old record cannot be removed; the directory then gets no more records from this
# process (see _write): the caps bound the disk the recorder takes.
sub _apply_caps {
    my ($rec, $name, $bytes) = @_;
    my $dir = $rec->{dir};
    my $known = $DIRS{$dir};
    if (!$known || !$known->{fresh}--) {
        my $size = $known ? $known->{size} : {};
        my @names = _records_oldest_first($dir);
        $known = $DIRS{$dir} = {
            names => \@names, size => { map { ($_ => $size->{$_} // (-s "$dir/$_") // 0) } @names }, fresh => LIST_EVERY,
        };
    } else {
        push @{ $known->{names} }, $name;
    }
    my ($names, $size) = @$known{qw(names size)};
    $size->{$name} = $bytes;
    my $total = 0;
    $total += $_ for values %$size;
    while (@$names > $rec->{max_files} || $total > $rec->{max_bytes}) {
        my $oldest = $names->[0];
        if (!unlink("$dir/$oldest") && !$!{ENOENT}) {    # (ENOENT: another process removed it)
            $known->{full} = 1;
            die "cannot remove the old record $dir/$oldest ($!), so the caps (record-max-files,"
                . " record-max-bytes) cannot be kept: no more records from this process there\n";
        }
        shift @$names;
        $total -= delete $size->{$oldest};
    }
    return;
}

# The recorder's files in $dir, oldest first: by when they were written (mtime), then by name.
sub _records_oldest_first {
    my ($dir) = @_;
    opendir(my $dh, $dir) or die "cannot list $dir: $!\n";
    my @names = map { $_ =~ $RECORD_NAME ? $1 : () } readdir $dh;
    closedir $dh;
    my %written = map { ($_ => (Time::HiRes::stat("$dir/$_"))[9] // 0) } @names;
    return sort { $written{$a} <=> $written{$b} || $a cmp $b } @names;
}

=back

=cut

1;
