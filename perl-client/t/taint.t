#!/usr/bin/perl
# Taint mode (perl -T, as the PVE daemons run): the server command and the log file from the
# config file work (the client untaints them by a strict pattern); the same settings from the
# environment, which taint mode distrusts, are refused with a message that says what to do.
# The program under -T does what PVE::Daemon does: a literal PATH, no ENV/BASH_ENV/IFS/CDPATH.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use Test::More;
use CRSBridgeTest;
use CRSBridge::Process;

my $DIR = tempdir(CLEANUP => 1);
my $LIB = "$FindBin::Bin/../lib";
my $SERVER = join(' ', @{ CRSBridge::Process::command() });
my $CONFIG = "$DIR/crs-bridge.conf";
die "the test's paths must be plain for the code below: $DIR $LIB\n" if "$DIR$LIB" =~ /['\\]/;

# Runs $code under perl -T with $CONFIG as the config file (named by a literal in the program,
# so untainted) and the environment %env (every other CRS_BRIDGE_* variable removed); returns
# its output (stdout and stderr).
sub run_tainted {
    my ($code, %env) = @_;
    local %ENV = %ENV;
    delete @ENV{ grep { /^CRS_BRIDGE_/ } keys %ENV };
    @ENV{ keys %env } = values %env;
    my $program = "\$| = 1; open(STDERR, '>&', \\*STDOUT); \$ENV{PATH} = '/usr/sbin:/usr/bin:/sbin:/bin';"
        . " delete \@ENV{qw(IFS CDPATH ENV BASH_ENV)}; \$ENV{CRS_BRIDGE_CONFIG} = '$CONFIG'; $code";
    open(my $out, '-|', $^X, '-T', "-I$LIB", '-e', $program) or die "perl: $!";
    local $/;
    my $said = <$out> // '';
    close($out);
    return $said;
}

sub write_config {
    my ($text) = @_;
    open(my $fh, '>', $CONFIG) or die "$CONFIG: $!";
    print {$fh} $text;
    close($fh);
}

my $ROUND = 'use PVE::RS::ResourceScheduling::Static;'
    . ' print "tainted\n" if ${^TAINT};'
    . ' my $u = PVE::RS::ResourceScheduling::Static->new();'
    . ' $u->add_node("a", 16, 2**36); $u->add_node("b", 16, 2**36);'
    . ' $u->add_service("vm:1", { stats => { maxcpu => 4, maxmem => 2**33 }, running => 1, "current-node" => "a" });'
    . ' printf "%.17g\n", $u->calculate_node_imbalance;';

sub expected_round {
    require PVE::RS::ResourceScheduling::Static;
    my $u = PVE::RS::ResourceScheduling::Static->new();
    $u->add_node('a', 16, 2**36);
    $u->add_node('b', 16, 2**36);
    $u->add_service('vm:1', { stats => { maxcpu => 4, maxmem => 2**33 }, running => 1, 'current-node' => 'a' });
    return sprintf("tainted\n%.17g\n", $u->calculate_node_imbalance);
}

my $expected = expected_round();

write_config("# as a package would ship it\ncommand: $SERVER\nlog: $DIR/server.log\n");
is(run_tainted($ROUND), $expected, "perl -T: the config file's command starts the server, the answer is right");
ok(-e "$DIR/server.log", "... and its log file was opened for the server");

write_config("command: $SERVER --trace '$DIR/trace file'\n");
is(run_tainted($ROUND), $expected, 'perl -T: a quoted argument with a space');
ok(-s "$DIR/trace file", '... reached the server as one word');

write_config('');
like(run_tainted($ROUND, CRS_BRIDGE_COMMAND => $SERVER),
    qr/^tainted\ncrs-bridge: CRS_BRIDGE_COMMAND is not used in taint mode \(perl -T\), which distrusts the environment: put the setting in \/etc\/crs-bridge\/crs-bridge\.conf instead/,
    'perl -T: a command from the environment is refused, saying what to do');
write_config("command: $SERVER\n");
like(run_tainted($ROUND, CRS_BRIDGE_LOG => "$DIR/other.log"), qr/^tainted\ncrs-bridge: CRS_BRIDGE_LOG is not used in taint mode/,
    'perl -T: a log file from the environment too');
is(run_tainted($ROUND, CRS_BRIDGE_TIMEOUT => 7, CRS_BRIDGE_IMBALANCE => 'raw'), $expected,
    'perl -T: settings that name no program or file may come from the environment');

(my $round_with_callers_path = $ROUND) =~ s/^/\$ENV{PATH} = \$ENV{HOME} . ':\/usr\/bin'; /;
like(run_tainted($round_with_callers_path, HOME => '/nonexistent'),
    qr/Insecure \$ENV\{PATH\}.*\n\(under perl -T, set PATH in the program before the first call, as the PVE daemons do\)/,
    'perl -T with a PATH from the environment: the message says what to do');

done_testing();
