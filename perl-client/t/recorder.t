#!/usr/bin/perl
# The flight recorder (CRSBridge::Recorder) end to end: an HA round with CRS_BRIDGE_RECORD set
# writes one file; `crs-bridge explain` of that file names the migration the round's query
# returned, with the same imbalance, bit for bit; `crs-bridge replay` re-runs it (exit 0), and
# finds an answer altered by one digit (exit 1, naming the call); a directory that cannot be
# written, or a full disk, warns once and changes no answer; the caps remove the oldest files.
# Real server, real client, real CLI.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Spec;
use File::Temp qw(tempdir);
use IPC::Open3 qw(open3);
use JSON::PP;
use Symbol qw(gensym);
use Test::More;
use CRSBridgeTest;
use HASim;

# The crs-bridge command: on PATH (make prove), else this tree's virtual environment.
my ($CLI) = grep { -x } map({ File::Spec->catfile($_, 'crs-bridge') } File::Spec->path),
    File::Spec->rel2abs("$FindBin::Bin/../../.venv/bin/crs-bridge");
plan skip_all => 'crs-bridge is not installed (make setup)' if !$CLI;

# (exit status, stdout, stderr) of crs-bridge with @args.
sub cli {
    my (@args) = @_;
    my $pid = open3(my $in, my $out, my $err = gensym, $CLI, @args);
    close $in;
    my ($stdout, $stderr) = (do { local $/; <$out> } // '', do { local $/; <$err> } // '');
    waitpid($pid, 0);
    return ($? >> 8, $stdout, $stderr);
}

# The record files in $dir, oldest first.
sub records {
    my ($dir) = @_;
    opendir(my $dh, $dir) or die "cannot list $dir: $!\n";
    return [ sort grep { /^crs-.*\.json$/ } readdir $dh ];
}

sub slurp {
    my ($path) = @_;
    open(my $fh, '<:raw', $path) or die "cannot read $path: $!\n";
    local $/;
    return <$fh>;
}

# A cluster out of balance (dynamic by default: measured cpu in fractions that need all 17
# digits) and a guest not yet confirmed running by the LRM.
sub simulation {
    my ($mode) = @_;
    my %services = map {
        ("vm:$_" => { node => $_ <= 7 ? 'n1' : $_ <= 9 ? 'n2' : 'n3', state => 'started', running => 1,
            maxcpu => 2.0 + $_ % 3, maxmem => (2 + $_ % 4) * GiB, cpu => 0.1 + $_ / 7, mem => (1 + $_ % 3) * GiB })
    } 1 .. 10;
    $services{'vm:10'}{running} = 0;
    return HASim->new(mode => $mode // 'dynamic', hold_duration => 1, services => \%services,
        nodes => { map { ("n$_" => { maxcpu => 16, maxmem => 64 * GiB, cpu => 1 / 3, mem => GiB }) } 1 .. 3 });
}

# One HA round with the recorder writing to $dir (undef: off); the round's report.
sub round_with_recorder {
    my ($sim, $dir) = @_;
    local $ENV{CRS_BRIDGE_RECORD} = $dir // '';
    return $sim->round;    # its usage object is dropped at the end of the round
}

# Two static HA rounds, each a line: the move and the imbalances.
sub static_rounds {
    return join('', map {
        my $report = simulation('static')->round;
        "$report->{move}{sid} $report->{move}{to} $report->{move}{expected} $report->{imbalance}\n";
    } 1, 2);
}

if (@ARGV && $ARGV[0] eq '--static-rounds') {    # the process of the full-disk test
    Test::More->builder->no_ending(1);
    $SIG{XFSZ} = 'IGNORE';    # a write past the limit then fails (EFBIG) instead of killing the process
    print static_rounds();
    exit 0;
}

my $dir = tempdir(CLEANUP => 1);
my $report = round_with_recorder(simulation(), $dir);
ok($report->{move}, 'the round migrates a guest') or diag explain $report;
my $files = records($dir);
is(scalar @$files, 1, 'the round wrote one file');
my $file = "$dir/$files->[0]";

subtest 'explain names the migration the round took, with the same imbalance' => sub {
    my ($status, $out, $err) = cli('explain', "\@$file", '--json');
    is($status, 0, 'explain exits 0') or diag $err;
    my $explanation = eval { JSON::PP->new->decode($out) } // {};
    my $chosen = $explanation->{chosen}[0] // {};
    is($chosen->{migration}{sid}, $report->{move}{sid}, 'the same guest');
    is($chosen->{migration}{'target-node'}, $report->{move}{to}, 'to the same node');
    ok($chosen->{imbalance} == $report->{move}{expected}, 'with the same expected imbalance, to the last bit')
        or diag "$chosen->{imbalance} vs $report->{move}{expected}";
    ok($explanation->{current}{imbalance} == $report->{imbalance}, 'from the same imbalance');
    is($explanation->{reason}, 'migrate', 'the HA checks agree: migrate');
    ($status, $out) = cli('explain', "\@$file");
    like($out, qr/Migrate \Q$report->{move}{sid}\E from \Q$report->{move}{from}\E to \Q$report->{move}{to}\E/,
        'the text says so');
    ($status, $out, $err) = cli('plan', "\@$file");
    is($status, 0, 'plan takes the file too') or diag $err;
};

subtest 'replay re-runs the calls and checks every answer' => sub {
    my ($status, $out, $err) = cli('replay', $file);
    is($status, 0, 'replay exits 0') or diag $err;
    like($out, qr/2 of 2 answers replayed, all bit-identical/, 'the imbalance and the scores compared');

    my $text = slurp($file);
    # The score's imbalance (the first "imbalance" number: candidates and options have none),
    # its last digit changed.
    ok($text =~ s/("imbalance":-?[0-9.e+-]*?)([0-9])([,}])/$1 . ($2 == 9 ? 8 : $2 + 1) . $3/e, 'an answer altered');
    my $altered = "$dir/altered.json";
    open(my $fh, '>:raw', $altered) or die "cannot write $altered: $!\n";
    print $fh $text;
    close $fh;
    ($status, $out, $err) = cli('replay', $altered);
    is($status, 1, 'replay of the altered file exits 1');
    like($err, qr/call 2 \(scheduler\.score_best_balancing_migration_candidates, after \d+ mutations\): result\[0\]\.imbalance: expected/,
        'naming the call and the value');
    unlink $altered;

    ($status, $out, $err) = cli('replay', "$dir/missing.json");
    is($status, 2, 'an unreadable file exits 2');
};

subtest 'removals and re-adds before the decision: explain sees the same state' => sub {
    my $record = tempdir(CLEANUP => 1);
    local $ENV{CRS_BRIDGE_RECORD} = $record;
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node("n$_", 8, 32 * GiB) for 1 .. 3;
    $usage->add_service("vm:$_", { stats => { maxcpu => 1 + $_ / 3, maxmem => $_ * GiB }, running => 1,
        'current-node' => $_ <= 4 ? 'n1' : 'n2' }) for 1 .. 6;
    $usage->remove_service_usage('vm:2');    # as HA's change_service_state: remove, add again
    $usage->add_service('vm:2', { stats => { maxcpu => 2, maxmem => 2 * GiB }, running => 1,
        'current-node' => 'n1', 'target-node' => 'n3' });
    $usage->add_service_usage_to_node('n3', 'vm:5', { maxcpu => 1, maxmem => GiB });
    my $candidates = [ map { { leader => "vm:$_", resources => ["vm:$_"], nodes => ['n3'] } } 1, 3, 4 ];
    my $best = $usage->score_best_balancing_migration_candidates($candidates, 1)->[0];
    undef $usage;
    my $path = "$record/" . records($record)->[0];
    my ($status, $out, $err) = cli('explain', "\@$path", '--json');
    is($status, 0, 'explain exits 0') or diag $err;
    my $chosen = (eval { JSON::PP->new->decode($out) } // {})->{chosen}[0] // {};
    is($chosen->{migration}{sid}, $best->{migration}{sid}, 'the same guest');
    ok(defined $chosen->{imbalance} && $chosen->{imbalance} == $best->{imbalance}, 'the same imbalance, to the last bit');
    is((cli('replay', $path))[0], 0, 'replay exits 0');
};

subtest 'adds after the last query, right before the drop, are in the journal' => sub {
    # The adds' common case is handed to the journal in batches: the drop hands over the last one.
    my $record = tempdir(CLEANUP => 1);
    local $ENV{CRS_BRIDGE_RECORD} = $record;
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node("n$_", 8, 32 * GiB) for 1 .. 2;
    my $add = sub { $usage->add_service("vm:$_[0]", { stats => { maxcpu => 1, maxmem => GiB }, running => 1,
        'current-node' => 'n1' }) };
    $add->($_) for 1 .. 3;
    $usage->calculate_node_imbalance;
    $add->($_) for 4 .. 5;
    undef $usage;
    my $file = eval { JSON::PP->new->decode(slurp("$record/" . records($record)->[0])) } // {};
    my @sids = map { $_->[0] eq 'add_service' ? $_->[1] : () } @{ $file->{record}{journal} // [] };
    is_deeply(\@sids, [ map {"vm:$_"} 1 .. 5 ], 'every add, in order');
    is($file->{record}{calls}[0]{at}, 5, 'the query came after the nodes and the first three');
};

subtest 'the decision is the last scoring answer, not a failed query' => sub {
    my $record = tempdir(CLEANUP => 1);
    local $ENV{CRS_BRIDGE_RECORD} = $record;
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node("n$_", 8, 32 * GiB) for 1 .. 3;
    $usage->add_service("vm:$_", { stats => { maxcpu => 2, maxmem => $_ * GiB }, running => 1,
        'current-node' => 'n1' }) for 1 .. 4;
    my $candidates = [ map { { leader => "vm:$_", resources => ["vm:$_"], nodes => [ 'n2', 'n3' ] } } 1 .. 4 ];
    my $best = $usage->score_best_balancing_migration_candidates($candidates, 1)->[0];
    ok(!eval { $usage->score_best_balancing_migration_candidates([ { leader => 'vm:9', resources => ['vm:9'],
        nodes => ['n2'] } ], 1); 1 }, 'a later query fails');
    undef $usage;
    my $path = "$record/" . records($record)->[0];
    my ($status, $out, $err) = cli('explain', "\@$path", '--json');
    is($status, 0, 'explain exits 0') or diag $err;
    my $chosen = (eval { JSON::PP->new->decode($out) } // {})->{chosen}[0] // {};
    is_deeply($chosen->{migration}, $best->{migration}, 'the scoring answer\'s move');
    is((cli('replay', $path))[0], 0, 'replay exits 0: every call, the failed one too');
};

subtest 'a configured directory that does not exist yet is made' => sub {
    my $record = tempdir(CLEANUP => 1) . '/crs-bridge/record';
    round_with_recorder(simulation(), $record);
    is(scalar @{ records($record) }, 1, 'the round wrote its file into the new directory');
};

subtest 'a directory that cannot be written: one warning, the same answers' => sub {
    my $plain = "$dir/a-file";
    open(my $fh, '>', $plain) or die "cannot write $plain: $!\n";
    close $fh;
    my @warnings;
    local $SIG{__WARN__} = sub { push @warnings, $_[0] };
    # Static: HASim sums a dynamic node's measured usage in hash order, which changes last bits.
    my @on = map { round_with_recorder(simulation('static'), "$plain/records") } 1, 2;
    my $off = round_with_recorder(simulation('static'), undef);
    ok($off->{move}, 'the round without the recorder moves a guest');
    is(scalar @warnings, 1, 'two rounds, one warning') or diag explain \@warnings;
    like($warnings[0] // '', qr{^crs-bridge: flight recorder: cannot create \Q$plain\E/records/}, 'saying what failed');
    for my $report (@on) {
        is_deeply([ @{ $report->{move} }{qw(sid to)} ], [ @{ $off->{move} }{qw(sid to)} ], 'the same move');
        ok($report->{move}{expected} == $off->{move}{expected} && $report->{imbalance} == $off->{imbalance},
            'the same imbalances');
    }
};

subtest 'a full disk (a file size limit): one warning, no partial file, the same answers' => sub {
    my $full = tempdir(CLEANUP => 1);
    # This test in another process whose files may not grow past 1 KiB (ulimit -f 2: blocks of
    # 512 bytes or 1 KiB): there the records (some 4 KB) fail to be written as on a full disk.
    local $ENV{CRS_BRIDGE_RECORD} = $full;
    my $pid = open3(my $in, my $out, my $err = gensym, '/bin/sh', '-c', 'ulimit -f 2 && exec "$@"', 'sh',
        $^X, $0, '--static-rounds');
    close $in;
    my ($stdout, $stderr) = (do { local $/; <$out> } // '', do { local $/; <$err> } // '');
    waitpid($pid, 0);
    is($? >> 8, 0, 'the rounds went on') or diag $stderr;
    my @warnings = $stderr =~ /^(crs-bridge: flight recorder: .*)$/mg;
    is(scalar @warnings, 1, 'one warning for two rounds') or diag $stderr;
    like($warnings[0] // '', qr/short write|File too large/, 'saying why');
    opendir(my $dh, $full) or die "cannot list $full: $!\n";
    is_deeply([ grep { !/^\.\.?$/ } readdir $dh ], [], 'no file left behind');
    local $ENV{CRS_BRIDGE_RECORD} = '';
    is($stdout, static_rounds(), 'the same moves and imbalances as without the recorder');
};

subtest 'the caps remove the oldest files' => sub {
    my $capped = tempdir(CLEANUP => 1);
    my @written;
    {
        local $ENV{CRS_BRIDGE_RECORD_MAX_FILES} = 3;
        for (1 .. 5) {
            round_with_recorder(simulation(), $capped);
            my $now = records($capped);
            push @written, grep { my $name = $_; !grep { $_ eq $name } @written } @$now;
        }
    }
    is(scalar @written, 5, 'five files written');
    is_deeply(records($capped), [ @written[ 2 .. 4 ] ], 'the newest three kept');

    my $size = -s "$capped/$written[-1]";
    local $ENV{CRS_BRIDGE_RECORD_MAX_BYTES} = int(2.5 * $size);
    round_with_recorder(simulation(), $capped);
    my $left = records($capped);
    is(scalar @$left, 2, 'a byte cap of two and a half files keeps two');
    is($left->[0], $written[4], 'the oldest went first');
};

done_testing();
